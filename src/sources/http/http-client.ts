/**
 * One GET with bounded retries: exponential backoff with jitter on 429, 408, 5xx, timeouts, network errors,
 * truncated bodies and malformed JSON, honouring `Retry-After`. Every message names the URL with secrets redacted.
 */
import { SourceError } from '../../core/errors.js';
import { redact } from '../../core/logger.js';
import { JsonSyntaxError, parseExactJson, type ExactJson } from '../../shared/exact-json.js';
import { decodeBody } from './response-charset.js';

/** A response refused with a status that is not retried (4xx): callers that know what a status means say so. */
export class HttpStatusError extends SourceError {
  constructor(
    readonly status: number,
    message: string,
    options: ConstructorParameters<typeof SourceError>[1],
  ) {
    super(message, options);
  }
}

export interface RetryPolicy {
  readonly maxRetries: number;
  readonly backoffMs: number;
  readonly maxBackoffMs: number;
  readonly timeoutMs: number;
}

export interface JsonResponse {
  readonly url: string;
  readonly status: number;
  readonly headers: Headers;
  readonly body: ExactJson;
  /** The body as received, for detecting a paginator that serves the same page again. */
  readonly text: string;
}

/** A server asking for more than this is treated as failing rather than waited on indefinitely. */
const MAX_RETRY_AFTER_MS = 300_000;

export type Fetch = typeof fetch;

export class HttpClient {
  constructor(
    private readonly policy: RetryPolicy,
    /** Turns a URL into its printable form (query-string credentials masked). */
    private readonly display: (url: URL) => string,
    private readonly fetchImpl: Fetch = fetch,
  ) {}

  async getJson(url: URL, headers: Readonly<Record<string, string>>, signal?: AbortSignal): Promise<JsonResponse> {
    const shown = (): string => redact(this.display(url));
    let last = '';
    let lastStatus: number | undefined;
    const attempts = this.policy.maxRetries + 1;
    for (let attempt = 0; attempt < attempts; attempt += 1) {
      let waitMs: number | undefined;
      try {
        const timeout = AbortSignal.timeout(this.policy.timeoutMs);
        const response = await this.fetchImpl(url, {
          headers,
          signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
        });
        if (response.status === 429 || response.status === 408 || response.status >= 500) {
          lastStatus = response.status;
          last = `HTTP ${response.status}${await snippet(response)}`;
          waitMs = retryAfterMs(response.headers.get('retry-after'));
        } else if (!response.ok) {
          throw new HttpStatusError(response.status, redact(`GET ${shown()} failed: HTTP ${response.status}${await snippet(response)}`), { context: { phase: 'extract', at: shown() } });
        } else {
          const text = decodeBody(new Uint8Array(await response.arrayBuffer()), response.headers.get('content-type'), shown());
          try {
            return { url: url.toString(), status: response.status, headers: response.headers, body: parseExactJson(text), text };
          } catch (error) {
            if (!(error instanceof JsonSyntaxError)) throw error;
            lastStatus = response.status;
            last = `HTTP ${response.status} with a body that is not valid JSON (${error.message}; ${text.length} characters received)`;
          }
        }
      } catch (error) {
        if (error instanceof SourceError) throw error;
        if (signal?.aborted) throw error;
        last = describeNetworkError(error, this.policy.timeoutMs);
      }
      if (attempt + 1 < attempts) await sleep(waitMs ?? this.backoff(attempt), signal);
    }
    const status = lastStatus !== undefined ? ` (last status ${lastStatus})` : '';
    throw new SourceError(redact(`GET ${shown()} failed after ${attempts} attempt${attempts === 1 ? '' : 's'}${status}: ${last}`), {
      context: { phase: 'extract', at: shown() },
      retryable: true,
    });
  }

  /** Exponential backoff with "equal jitter": half fixed, half random, so clients that failed together spread out. */
  private backoff(attempt: number): number {
    const ceiling = Math.min(this.policy.maxBackoffMs, this.policy.backoffMs * 2 ** attempt);
    return ceiling / 2 + Math.random() * (ceiling / 2);
  }
}

async function snippet(response: Response): Promise<string> {
  const text = await response.text().catch(() => '');
  const oneLine = text.replace(/\s+/g, ' ').trim();
  return oneLine ? `: ${oneLine.length > 200 ? `${oneLine.slice(0, 200)}…` : oneLine}` : '';
}

function describeNetworkError(error: unknown, timeoutMs: number): string {
  if (error instanceof Error && (error.name === 'TimeoutError' || error.name === 'AbortError')) return `no complete response within ${timeoutMs} ms`;
  const cause = error instanceof Error && error.cause instanceof Error ? `: ${error.cause.message}` : '';
  return `${error instanceof Error ? error.message : String(error)}${cause}`;
}

/** `Retry-After` as seconds or an HTTP date; absent or unreadable gives undefined (use the backoff). */
export function retryAfterMs(header: string | null, now: number = Date.now()): number | undefined {
  if (header === null || header.trim() === '') return undefined;
  const text = header.trim();
  const ms = /^\d+$/.test(text) ? Number(text) * 1000 : Date.parse(text) - now;
  if (!Number.isFinite(ms)) return undefined;
  return Math.min(Math.max(ms, 0), MAX_RETRY_AFTER_MS);
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
