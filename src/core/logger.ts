/**
 * A tiny logger. Every line passes through the redactor, so a secret resolved from `${env:…}` never reaches a
 * terminal, a log file or an error message printed by the CLI. `TIDEMARK_LOG_FORMAT=json` (the CLI's
 * `--log-format json`) makes each line one JSON object, for log shippers.
 */
import { writeOut } from './stdio.js';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

const secrets = new Set<string>();

/** Remembers a secret value so that every later message hides it. */
export function registerSecret(value: string): void {
  if (value.length >= 4) secrets.add(value);
}

export function redact(text: string): string {
  let out = text;
  for (const secret of secrets) out = out.split(secret).join('***');
  return out;
}

/** Where a line comes from, as separate fields of a JSON line (a text line names them in its message). */
export interface LogFields {
  readonly pipeline?: string;
  readonly stream?: string;
  readonly run_id?: string;
  readonly phase?: string;
  /** The kind of the typed error the line reports (config, source, destination, state, conflict, usage). */
  readonly error_kind?: string;
}

export interface Logger {
  log(level: LogLevel, message: string, fields?: LogFields): void;
}

export type LogFormat = 'text' | 'json';

/** Read at each line, not once: the CLI sets it from `--log-format` after this module has loaded. */
export function logFormat(): LogFormat {
  return process.env.TIDEMARK_LOG_FORMAT === 'json' ? 'json' : 'text';
}

/** One line, newline included: `level: message` (after an ISO time with `timestamps`), or one JSON object. */
export function formatLogLine(level: LogLevel, message: string, fields: LogFields = {}, options: { timestamps?: boolean } = {}): string {
  if (logFormat() === 'json') return `${redact(JSON.stringify({ time: new Date().toISOString(), level, ...fields, message: redact(message) }))}\n`;
  return `${options.timestamps ? `${new Date().toISOString()} ` : ''}${level}: ${redact(message)}\n`;
}

const ORDER: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3 };

/**
 * Lines to stderr at `min` or above. Long-running processes (worker, schedule) pass `timestamps`: their lines are read
 * later, in a log, where "when" matters as much as "what".
 */
export function stderrLogger(
  min: LogLevel = (process.env.TIDEMARK_LOG_LEVEL as LogLevel | undefined) ?? 'warn',
  options: { timestamps?: boolean; write?: (text: string) => void } = {},
): Logger {
  const write = options.write ?? ((text: string) => writeOut(2, text));
  return {
    log(level, message, fields) {
      if (ORDER[level] < ORDER[min]) return;
      write(formatLogLine(level, message, fields, options));
    },
  };
}

export const silentLogger: Logger = { log: () => undefined };
