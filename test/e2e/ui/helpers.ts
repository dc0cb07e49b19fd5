/** Starting `tidemark ui` and a headless Chromium for the dashboard's end-to-end tests. */
import { chromium, type Browser } from 'playwright-core';
import { startCli } from '../../helpers/cli.js';

export const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
];

export function launchBrowser(): Promise<Browser> {
  return chromium.launch({ executablePath: '/usr/bin/chromium', args: CHROMIUM_ARGS });
}

export interface RunningUi {
  readonly url: string;
  /** What the server printed, for failure messages. */
  output(): string;
  stop(): Promise<void>;
}

/** Starts the built CLI's `ui` on a free port and waits for the line with its address. */
export async function startUi(args: readonly string[]): Promise<RunningUi> {
  const { child, done } = startCli(['ui', ...args, '--port', '0']);
  let out = '';
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`tidemark ui did not start:\n${out}`)), 20_000);
    const onData = (d: Buffer) => {
      out += d.toString();
      const m = /(http:\/\/127\.0\.0\.1:\d+\/)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    void done.then((r) => {
      clearTimeout(timer);
      reject(new Error(`tidemark ui exited with ${r.code}:\n${out}`));
    });
  });
  return {
    url,
    output: () => out,
    stop: async () => {
      if (child.exitCode === null) child.kill('SIGTERM');
      await done;
    },
  };
}
