import { registerSecret } from '../core/logger.js';

const DATABASE_URL = /^(postgres(ql)?|mysql|mariadb):\/\//i;

/**
 * Registers the secrets of a connection URL so no log or error shows them: a database URL's password (also as a
 * `password` query parameter); any other text whole. The rest of a database URL (user, host, database) stays
 * readable: messages name the server that failed.
 */
export function registerUrlSecrets(url: string): void {
  let parsed: URL | undefined;
  try {
    parsed = DATABASE_URL.test(url) ? new URL(url) : undefined;
  } catch {
    parsed = undefined;
  }
  if (parsed === undefined) {
    registerSecret(url);
    return;
  }
  for (const password of [parsed.password, parsed.searchParams.get('password') ?? '']) {
    if (!password) continue;
    registerSecret(password);
    registerSecret(decodeURIComponent(password));
  }
}
