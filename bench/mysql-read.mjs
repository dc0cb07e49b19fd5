/**
 * The MySQL source alone (no destination): a full read of `trips` through dist/'s MysqlSource, rows counted and
 * dropped, to set its CPU time and peak RSS beside `mysql --quick -e "SELECT * FROM trips" > /dev/null`.
 *   /usr/bin/time -v node bench/mysql-read.mjs <db> [<root with dist/>]
 * The table comes from `npx tsx bench/mysql-taxi.ts create <db>`.
 */
import { pathToFileURL } from 'node:url';
import { resolve } from 'node:path';

const [db, root = '.'] = process.argv.slice(2);
const base = process.env.BENCH_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306';
const { MysqlSource } = await import(pathToFileURL(resolve(root, 'dist/sources/mysql/mysql-source.js')).href);
const source = await MysqlSource.connect({ url: `${base}/${db}`, maxSkewMs: 0 });
const stream = { name: 'trips', table: 'trips', primaryKey: ['trip_id'] };
const read = await source.open({ stream, incremental: false, nullCursor: 'include', batchRows: 10_000 });
let rows = 0;
for await (const batch of read.batches()) rows += batch.rows.length;
await read.close();
await source.close();
console.log(`${rows} rows`);
