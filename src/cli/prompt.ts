/** Questions on a terminal. Without one there is nobody to ask: callers get `undefined` and must say what to pass. */
import { createInterface } from 'node:readline/promises';

export async function ask(question: string): Promise<string | undefined> {
  if (!process.stdin.isTTY) return undefined;
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  try {
    return (await rl.question(question)).trim();
  } finally {
    rl.close();
  }
}

/** y/yes is a yes; an empty answer is `fallback`; anything else, and no terminal at all, is a no. */
export async function confirm(question: string, fallback = false): Promise<boolean> {
  const answer = await ask(question);
  if (answer === undefined) return false;
  return answer === '' ? fallback : /^y(es)?$/i.test(answer);
}
