#!/usr/bin/env node
// The compiled CLI: plain Node, no loader. Job modules in TypeScript load through tsx when the
// application has it installed (see src/typescript-loader.ts).
import '../dist/main.js';
