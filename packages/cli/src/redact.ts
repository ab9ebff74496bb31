/**
 * Connection URLs carry passwords; nothing the CLI prints (tables, JSON, findings, errors,
 * driver messages) may show one. Every line of output goes through {@link redact}.
 */

/** `scheme://user:password@host` -> `scheme://user:***@host`, and `password=…` parameters. */
export function redactUrl(url: string): string {
  return url.replace(/(\/\/[^:@/\s]*):[^@/\s]*@/g, '$1:***@').replace(/([?&](?:password|pass|pwd)=)[^&\s]*/gi, '$1***');
}

const secrets = new Set<string>();

/** Remembers the password of `url` (if any) so that {@link redact} also removes it where a driver quotes it alone. */
export function registerSecret(url: string): void {
  try {
    const password = decodeURIComponent(new URL(url).password);
    // A one- or two-character password would blank out ordinary text; URLs are redacted anyway.
    if (password.length >= 3) secrets.add(password);
  } catch {
    // not a URL: nothing to remember
  }
}

/** Removes every URL password and every registered secret from `text`. */
export function redact(text: string): string {
  let out = redactUrl(text);
  for (const secret of secrets) out = out.split(secret).join('***');
  return out;
}
