/**
 * The lake (files destination, Parquet) on a directory or a bucket, read the way an outside reader must:
 * state.json → its committed manifest → the objects it names. The oracle's lake rules: every object the
 * manifest names exists and is named once, and after the next run no object is left that no manifest names.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';
import { tempDir } from '../../helpers/fs.js';
import { bucketLake, committed, dirLake, orphans, type LakeAccess } from '../../e2e/lake/helpers.js';
import type { LocalS3 } from '../../helpers/s3.js';
import { canonicalRow, COLUMN_NAMES, type Canonical } from '../fixture.js';
import type { CellSpec, DestinationAdapter, DestinationInstance, Verdict } from '../types.js';

async function lakeRows(lake: LakeAccess, pipeline: string, table: string): Promise<Canonical[]> {
  const c = await committed(lake, pipeline);
  const files = c?.manifest.tables[table]?.files ?? [];
  if (files.length === 0) return [];
  const { dir, cleanup } = await tempDir('tidemark-matrix-lake-');
  const instance = await DuckDBInstance.create(':memory:');
  const connection = await instance.connect();
  try {
    await connection.run(`SET TimeZone = 'UTC'`);
    const paths: string[] = [];
    for (const [i, f] of files.entries()) {
      const body = await lake.get(f.key);
      if (!body) throw new Error(`the committed manifest names ${f.key}, which does not exist`);
      const path = join(dir, `${i}.parquet`);
      await writeFile(path, body);
      paths.push(path);
    }
    const cols = COLUMN_NAMES.map((c) => `CAST("${c}" AS VARCHAR) AS "${c}"`).join(', ');
    const reader = `read_parquet([${paths.map((p) => `'${p}'`).join(', ')}], union_by_name = true)`;
    return ((await connection.runAndReadAll(`SELECT ${cols} FROM ${reader}`)).getRowObjectsJS() as Record<string, unknown>[]).map(canonicalRow);
  } finally {
    connection.closeSync();
    instance.closeSync();
    await cleanup();
  }
}

async function namedObjects(lake: LakeAccess, pipeline: string): Promise<string[]> {
  const c = await committed(lake, pipeline).catch(() => undefined);
  return c ? [...Object.values(c.manifest.tables), ...Object.values(c.manifest.builds ?? {})].flatMap((t) => t.files.map((f) => f.key)) : [];
}

/**
 * `replacedLastRun`: objects the manifest named when the final run started. A `replace` leaves the generation it
 * swapped out readable until the next run collects it, so those may remain; anything else unnamed is an orphan.
 */
async function lakeCheck(lake: LakeAccess, pipeline: string, table: string, afterNextRun: boolean, replacedLastRun: ReadonlySet<string>): Promise<void> {
  const c = await committed(lake, pipeline);
  if (!c) return;
  const keys = new Set(await lake.keys());
  const named = await namedObjects(lake, pipeline);
  const twice = named.filter((k, i) => named.indexOf(k) !== i);
  if (twice.length > 0) throw new Error(`the committed manifest names ${twice[0]} more than once`);
  const absent = named.filter((k) => !keys.has(k));
  if (absent.length > 0) throw new Error(`the committed manifest names objects that do not exist: ${absent.slice(0, 3).join(', ')}`);
  if (afterNextRun) {
    const left = (await orphans(lake, pipeline)).filter((k) => !replacedLastRun.has(k));
    if (left.length > 0) throw new Error(`objects no committed manifest names after the next run (${table}): ${left.slice(0, 5).join(', ')}`);
  }
}

const validate = (c: CellSpec): Verdict =>
  c.write === 'merge' ? { refuse: /the files destination cannot merge/, why: 'objects in a directory or bucket are never updated in place' } : undefined;

function instance(yaml: string, lake: LakeAccess, extra: Partial<DestinationInstance> = {}): DestinationInstance {
  let namedBeforeRun = new Set<string>();
  return {
    yaml,
    rows: (pipeline, table) => lakeRows(lake, pipeline, table),
    check: (pipeline, table, after) => lakeCheck(lake, pipeline, table, after, namedBeforeRun),
    async beforeRun(pipeline) {
      namedBeforeRun = new Set(await namedObjects(lake, pipeline));
    },
    cleanup: async () => undefined,
    ...extra,
  };
}

export const lakeDirDestination: DestinationAdapter = {
  name: 'lake-dir',
  validate,
  async setup(ctx) {
    const location = join(ctx.dir, 'lake');
    return instance(`destination:\n  type: files\n  location: ${JSON.stringify(location)}\n  format: parquet`, dirLake(location));
  },
};

/** The lake in a bucket of the shared s3rver; s3rver ignores conditional writes, so the lease lives in a file. */
export function lakeS3Destination(s3: () => Promise<LocalS3>): DestinationAdapter {
  return {
    name: 'lake-s3',
    validate,
    async setup(ctx) {
      const server = await s3();
      const prefix = `lake-${ctx.uid}`;
      const yaml = [
        'destination:',
        '  type: files',
        `  location: ${JSON.stringify(`s3://${server.bucket}/${prefix}`)}`,
        '  format: parquet',
        `  endpoint: ${JSON.stringify(server.endpoint)}`,
        '  region: us-east-1',
        '  credentials: {access_key_id: "${env:TM_S3_KEY}", secret_access_key: "${env:TM_S3_SECRET}"}',
        `  lock: {type: file, path: ${JSON.stringify(join(ctx.dir, 'locks'))}}`,
      ].join('\n');
      return instance(yaml, bucketLake(server, prefix), { env: server.env });
    },
  };
}
