/** `128MB`, `64KB`, `1GB`, `4096` (bytes; units are powers of 1024): sizes as the config and the CLI take them. */
export function parseByteSize(text: string | number): number | undefined {
  if (typeof text === 'number') return Number.isInteger(text) && text > 0 ? text : undefined;
  const m = /^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|KiB|MiB|GiB)?\s*$/i.exec(text);
  if (!m) return undefined;
  const unit = (m[2] ?? 'B').toLowerCase();
  const factor = unit.startsWith('k') ? 1024 : unit.startsWith('m') ? 1024 ** 2 : unit.startsWith('g') ? 1024 ** 3 : 1;
  const bytes = Math.floor(Number(m[1]) * factor);
  return bytes > 0 ? bytes : undefined;
}
