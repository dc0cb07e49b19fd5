#!/usr/bin/env node
// A Singer tap whose API answers an HTML error page mid-stream and which prints it. Config: {"count": N,
// "html_after": K, "then": "write" | "exit"}. `write`: it goes on writing until nobody reads its stdout and dies of
// EPIPE (exit 1, a stack on stderr), as a tap does once tidemark stops reading; `exit`: it fails at once (exit 1).
import { config, out } from './tap-io.mjs';
const schema = { type: 'object', properties: { id: { type: 'integer' } } };
out(JSON.stringify({ type: 'SCHEMA', stream: 'numbers', schema, key_properties: ['id'] }));
for (let id = 1; id <= config.count; id += 1) {
  if (id === config.html_after + 1) {
    process.stdout.write('<html><head><title>502 Bad Gateway</title></head><body>upstream error</body></html>\n');
    if (config.then === 'exit') {
      process.stderr.write('Traceback (most recent call last):\n  json.decoder.JSONDecodeError: Expecting value\n');
      process.exit(1);
    }
    const line = `${JSON.stringify({ type: 'RECORD', stream: 'numbers', record: { id: 0 } })}\n`;
    const more = () => {
      while (process.stdout.write(line));
      process.stdout.once('drain', more);
    };
    more();
    break;
  }
  out(JSON.stringify({ type: 'RECORD', stream: 'numbers', record: { id } }));
  if (id % 10 === 0) // The SDK's bookmark form, which tidemark can check against the records before it: a commit point.
  out(JSON.stringify({ type: 'STATE', value: { bookmarks: { numbers: { replication_key: 'id', replication_key_value: id } } } }));
}
