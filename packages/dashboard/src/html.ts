// HTML is built from tagged templates: every interpolated value is escaped unless it is already
// `Html` (the output of another `html` template or of `raw` for trusted constant markup), so no
// value read from the database (a job type, an error, a payload) can inject markup.

const HTML = Symbol('html');

export interface Html {
  readonly [HTML]: true;
  readonly text: string;
}

function isHtml(value: unknown): value is Html {
  return typeof value === 'object' && value !== null && HTML in value;
}

export function escapeHtml(text: string): string {
  return text
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}

/** Trusted markup, as is: only for constants written in this package. */
export function raw(text: string): Html {
  return { [HTML]: true, text };
}

type Part = Html | string | number | null | undefined | false | readonly Part[];

function render(value: Part): string {
  if (value === null || value === undefined || value === false) return '';
  if (Array.isArray(value)) return value.map((v: Part) => render(v)).join('');
  if (isHtml(value)) return value.text;
  return escapeHtml(String(value));
}

export function html(strings: TemplateStringsArray, ...values: Part[]): Html {
  let out = strings[0]!;
  for (let i = 0; i < values.length; i++) out += render(values[i]!) + strings[i + 1]!;
  return raw(out);
}
