/**
 * The small error set of tidemark. Each error names where it happened (pipeline, stream, phase) and keeps its
 * cause; the CLI maps `kind` to an exit code in one place.
 */

import { redact, type LogFields } from './logger.js';

export type ErrorKind = 'config' | 'source' | 'destination' | 'state' | 'conflict' | 'usage';

export interface ErrorContext {
  readonly pipeline?: string;
  readonly stream?: string;
  readonly phase?: string;
  /** The offending file, row, column or document path. */
  readonly at?: string;
}

export class TidemarkError extends Error {
  readonly kind: ErrorKind;
  readonly context: ErrorContext;
  /** A retry might succeed (network blips, lock waits); a config error never will. */
  readonly retryable: boolean;

  constructor(kind: ErrorKind, message: string, options: { context?: ErrorContext; cause?: unknown; retryable?: boolean } = {}) {
    super(message, { cause: options.cause });
    this.name = `${kind[0]!.toUpperCase()}${kind.slice(1)}Error`;
    this.kind = kind;
    this.context = options.context ?? {};
    this.retryable = options.retryable ?? false;
  }

  /** One line: `pipeline orders, stream orders, phase extract: message (at …)`. */
  describe(): string {
    const where = [
      this.context.pipeline !== undefined ? `pipeline ${this.context.pipeline}` : '',
      this.context.stream !== undefined ? `stream ${this.context.stream}` : '',
      this.context.phase !== undefined ? `phase ${this.context.phase}` : '',
    ].filter(Boolean);
    const at = this.context.at !== undefined ? ` (at ${this.context.at})` : '';
    return `${where.length ? `${where.join(', ')}: ` : ''}${this.message}${at}`;
  }
}

export class ConfigError extends TidemarkError {
  constructor(message: string, options: { context?: ErrorContext; cause?: unknown } = {}) {
    super('config', message, options);
  }
}

export class SourceError extends TidemarkError {
  constructor(message: string, options: { context?: ErrorContext; cause?: unknown; retryable?: boolean } = {}) {
    super('source', message, options);
  }
}

export class DestinationError extends TidemarkError {
  constructor(message: string, options: { context?: ErrorContext; cause?: unknown; retryable?: boolean } = {}) {
    super('destination', message, options);
  }
}

export class StateError extends TidemarkError {
  constructor(message: string, options: { context?: ErrorContext; cause?: unknown } = {}) {
    super('state', message, options);
  }
}

/** Another run holds the pipeline, or a zombie run was fenced off. */
export class ConflictError extends TidemarkError {
  constructor(message: string, options: { context?: ErrorContext; cause?: unknown } = {}) {
    super('conflict', message, options);
  }
}

/**
 * This run's own lease expired, was taken over or lost its session: it stops before committing anything more. A
 * failure (exit 1), unlike a run that found another one holding the pipeline (exit 3, a harmless skip for a
 * scheduler): nothing else may be running, and the run did not finish.
 */
const LOST = 'this run lost its lease: ';

export class LeaseLostError extends ConflictError {
  constructor(message: string, options: { context?: ErrorContext; cause?: unknown } = {}) {
    super(message.startsWith(LOST) ? message : `${LOST}${message}`, options);
    this.name = 'LeaseLostError';
  }
}

export class UsageError extends TidemarkError {
  constructor(message: string, options: { context?: ErrorContext; cause?: unknown } = {}) {
    super('usage', message, options);
  }
}

/** Adds context an inner layer did not know (the engine knows the stream, a connector does not). */
export function withContext(error: unknown, context: ErrorContext, fallbackKind: ErrorKind): TidemarkError {
  if (error instanceof TidemarkError) {
    const merged: ErrorContext = { ...context, ...stripUndefined(error.context) };
    Object.defineProperty(error, 'context', { value: merged });
    return error;
  }
  const message = error instanceof Error ? error.message : String(error);
  return new TidemarkError(fallbackKind, message, { context, cause: error });
}

function stripUndefined(context: ErrorContext): ErrorContext {
  return Object.fromEntries(Object.entries(context).filter(([, v]) => v !== undefined)) as ErrorContext;
}

/** The one-line message of any error, with every registered secret hidden (it may end up in run records). */
/** A typed error's context and kind, as the fields of a log line. */
export function errorFields(error: unknown): LogFields {
  if (!(error instanceof TidemarkError)) return {};
  const { pipeline, stream, phase } = error.context;
  return { ...(pipeline !== undefined ? { pipeline } : {}), ...(stream !== undefined ? { stream } : {}), ...(phase !== undefined ? { phase } : {}), error_kind: error.kind };
}

export function errorMessage(error: unknown): string {
  if (error instanceof TidemarkError) return redact(error.describe());
  if (error instanceof Error) return redact(error.message);
  return redact(String(error));
}
