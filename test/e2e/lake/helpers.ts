/** Reading a lake the way an outside reader would: state.json → committed manifest → data objects. */
import { readFile, readdir } from 'node:fs/promises';
import { join, relative, sep } from 'node:path';
import { GetObjectCommand, ListObjectsV2Command } from '@aws-sdk/client-s3';
import { DuckDBInstance } from '@duckdb/node-api';
import { bucketYaml, type LocalS3 } from '../../helpers/s3.js';
import { tempDir } from '../../helpers/fs.js';

export interface LakeAccess {
  keys(): Promise<string[]>;
  get(key: string): Promise<Buffer | undefined>;
}

export function dirLake(root: string): LakeAccess {
  return {
    async keys() {
      const out: string[] = [];
      const walk = async (d: string): Promise<void> => {
        for (const e of await readdir(d, { withFileTypes: true }).catch(() => [])) {
          const full = join(d, e.name);
          if (e.isDirectory()) await walk(full);
          else out.push(relative(root, full).split(sep).join('/'));
        }
      };
      await walk(root);
      return out.sort();
    },
    get: (key) => readFile(join(root, key)).catch(() => undefined),
  };
}

export function bucketLake(s3: LocalS3, prefix: string): LakeAccess {
  return {
    async keys() {
      const out: string[] = [];
      let token: string | undefined;
      do {
        const page = await s3.client.send(new ListObjectsV2Command({ Bucket: s3.bucket, Prefix: `${prefix}/`, ...(token ? { ContinuationToken: token } : {}) }));
        for (const o of page.Contents ?? []) out.push(o.Key!.slice(prefix.length + 1));
        token = page.IsTruncated ? page.NextContinuationToken : undefined;
      } while (token);
      return out.sort();
    },
    async get(key) {
      try {
        const r = await s3.client.send(new GetObjectCommand({ Bucket: s3.bucket, Key: `${prefix}/${key}` }));
        return Buffer.from(await r.Body!.transformToByteArray());
      } catch {
        return undefined;
      }
    },
  };
}

export interface Committed {
  readonly state: { tidemark: { version: number; commit: number; manifest: string; state: { streams: Record<string, { watermark?: { cursor: { value: string }; pk: { value: string }[] } }> } | null } ; bookmarks: Record<string, unknown> };
  readonly manifest: { commit: number; key: string; tables: Record<string, { files: { key: string; rows: number; partition?: { value: string } }[] }>; builds: Record<string, { files: { key: string }[] }> };
}

export async function committed(lake: LakeAccess, pipeline: string): Promise<Committed | undefined> {
  const body = await lake.get(`_tidemark/state/${pipeline}/state.json`);
  if (!body) return undefined;
  const state = JSON.parse(body.toString('utf8'));
  const manifest = JSON.parse((await lake.get(state.tidemark.manifest))!.toString('utf8'));
  return { state, manifest };
}

/** Rows of a committed table, as `id:value`, read by DuckDB from the objects the manifest names. */
export async function tableRows(lake: LakeAccess, pipeline: string, table: string, sql = `CAST(id AS VARCHAR) || ':' || value`): Promise<string[]> {
  const c = await committed(lake, pipeline);
  const files = c?.manifest.tables[table]?.files ?? [];
  if (files.length === 0) return [];
  const { dir, cleanup } = await tempDir('tidemark-lake-read-');
  const instance = await DuckDBInstance.create(':memory:');
  const connection = await instance.connect();
  try {
    const paths: string[] = [];
    for (const [i, f] of files.entries()) {
      const path = join(dir, `${i}.parquet`);
      await import('node:fs/promises').then((fs) => lake.get(f.key).then((b) => fs.writeFile(path, b!)));
      paths.push(path);
    }
    const reader = `read_parquet([${paths.map((p) => `'${p}'`).join(', ')}], union_by_name = true)`;
    const rows = (await connection.runAndReadAll(`SELECT ${sql} AS r FROM ${reader} ORDER BY id`)).getRowsJS() as [string][];
    return rows.map((r) => r[0]);
  } finally {
    connection.closeSync();
    instance.closeSync();
    await cleanup();
  }
}

/** Objects no committed manifest names: parts of killed runs, uncommitted manifests, temp files. */
export async function orphans(lake: LakeAccess, pipeline: string): Promise<string[]> {
  const c = await committed(lake, pipeline);
  const named = new Set<string>();
  for (const t of [...Object.values(c?.manifest.tables ?? {}), ...Object.values(c?.manifest.builds ?? {})]) for (const f of t.files) named.add(f.key);
  const out: string[] = [];
  for (const key of await lake.keys()) {
    const base = key.split('/').pop()!;
    if (base.startsWith('.tidemark-tmp-') || base.endsWith('.json.lock')) out.push(key);
    else if (base.startsWith('part-') && !named.has(key)) out.push(key);
    else if (key.startsWith(`_tidemark/manifests/${pipeline}/`) && Number(base.slice(0, 12)) > (c?.manifest.commit ?? 0)) out.push(key);
  }
  return out;
}

/** A pipeline's `destination:` section for a lake in `<dir>/lake`, or in the bucket under `prefix` (its lease in `<dir>/locks`). */
export function lakeDestinationYaml(where: 'dir' | 's3', dir: string, s3: LocalS3, prefix: string, extra = ''): string {
  if (where === 'dir') return `destination:\n  type: files\n  location: ${JSON.stringify(join(dir, 'lake'))}\n${extra}`;
  return `destination:\n  type: files\n${bucketYaml(s3, prefix)}  lock: {type: file, path: ${JSON.stringify(join(dir, 'locks'))}}\n${extra}`;
}
