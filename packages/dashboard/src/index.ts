export { createDashboard } from './dashboard.js';
export type { Dashboard, DashboardOptions } from './dashboard.js';
export type { TokenFailureLimit } from './token-throttle.js';
export { isLoopback } from './security.js';
