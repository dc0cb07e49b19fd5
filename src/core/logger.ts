/**
 * A tiny logger. Every line passes through the redactor, so a secret resolved from `${env:…}` never reaches a
 * terminal, a log file or an error message printed by the CLI.
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

export interface Logger {
  log(level: LogLevel, message: string): void;
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
    log(level, message) {
      if (ORDER[level] < ORDER[min]) return;
      write(`${options.timestamps ? `${new Date().toISOString()} ` : ''}${level}: ${redact(message)}\n`);
    },
  };
}

export const silentLogger: Logger = { log: () => undefined };
