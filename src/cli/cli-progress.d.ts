/** The part of cli-progress (which ships no types) that the run display uses. */
declare module 'cli-progress' {
  interface BarOptions {
    stream?: NodeJS.WritableStream;
    fps?: number;
    hideCursor?: boolean;
    clearOnComplete?: boolean;
    gracefulExit?: boolean;
    linewrap?: boolean;
    format?: (options: unknown, params: unknown, payload: Record<string, unknown>) => string;
  }
  class GenericBar {
    update(value: number, payload?: Record<string, unknown>): void;
  }
  class MultiBar {
    constructor(options: BarOptions);
    create(total: number, start: number, payload?: Record<string, unknown>): GenericBar;
    stop(): void;
    update(): void;
    log(text: string): void;
  }
  const progress: { MultiBar: typeof MultiBar };
  export default progress;
}
