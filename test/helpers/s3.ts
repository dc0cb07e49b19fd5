/**
 * A local S3-compatible server for tests: s3rver on 127.0.0.1, a random port and a temp directory.
 * It handles objects and multipart uploads but ignores conditional writes (If-None-Match / If-Match).
 */
import { readFile } from 'node:fs/promises';
import { PutObjectCommand, DeleteObjectCommand, S3Client } from '@aws-sdk/client-s3';
import S3rver from 's3rver';
import { tempDir } from './fs.js';

export interface LocalS3 {
  readonly endpoint: string;
  readonly bucket: string;
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  readonly client: S3Client;
  /** Uploads a local file (or a string) to `key`. */
  put(key: string, body: string | Uint8Array | { file: string }): Promise<void>;
  remove(key: string): Promise<void>;
  /** Environment for a CLI run whose pipeline reads credentials from `${env:TM_S3_KEY}` / `${env:TM_S3_SECRET}`. */
  readonly env: Record<string, string>;
  stop(): Promise<void>;
}

export async function startS3(bucket = 'tidemark-test'): Promise<LocalS3> {
  const { dir, cleanup } = await tempDir('tidemark-s3rver-');
  const server = new S3rver({
    address: '127.0.0.1',
    port: 0,
    directory: dir,
    silent: true,
    allowMismatchedSignatures: true,
    vhostBuckets: false,
    configureBuckets: [{ name: bucket }],
  });
  const { port } = await server.run();
  const endpoint = `http://127.0.0.1:${port}`;
  const accessKeyId = 'S3RVER';
  const secretAccessKey = 'S3RVER';
  const client = new S3Client({ endpoint, region: 'us-east-1', forcePathStyle: true, credentials: { accessKeyId, secretAccessKey } });
  return {
    endpoint,
    bucket,
    accessKeyId,
    secretAccessKey,
    client,
    async put(key, body) {
      const bytes = typeof body === 'object' && 'file' in body ? await readFile(body.file) : body;
      await client.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: bytes }));
    },
    async remove(key) {
      await client.send(new DeleteObjectCommand({ Bucket: bucket, Key: key }));
    },
    env: { TM_S3_KEY: accessKeyId, TM_S3_SECRET: secretAccessKey },
    async stop() {
      client.destroy();
      await server.close();
      await cleanup();
    },
  };
}

/** The YAML lines of a `type: files` section on this server (`location`, `endpoint`, credentials from the env). */
export function bucketYaml(s3: LocalS3, prefix: string, indent = '  '): string {
  return [
    `location: s3://${s3.bucket}/${prefix}`,
    `endpoint: ${s3.endpoint}`,
    'credentials:',
    '  access_key_id: ${env:TM_S3_KEY}',
    '  secret_access_key: ${env:TM_S3_SECRET}',
  ]
    .map((line) => `${indent}${line}\n`)
    .join('');
}
