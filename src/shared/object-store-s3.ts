/**
 * The S3-compatible side of shared/object-store.ts. Imported lazily, so pipelines without a bucket never load
 * the AWS SDK.
 */
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import {
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
} from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { ConflictError, SourceError } from '../core/errors.js';
import { checkKey, writeBodyToFile, type ObjectInfo, type ObjectStore, type ObjectStoreOptions, type PutOptions } from './object-store.js';

// The SDK prints an 8-line Node-version notice on the first client of a process (Node < 22). It is about the SDK's
// future releases, not about anything the user can act on in tidemark, so library users and the CLI alike are spared
// it; a user who set the variable either way keeps their choice.
if (process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED === undefined) process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';

function stripQuotes(etag: string | undefined): string | undefined {
  return etag === undefined ? undefined : etag.replace(/^W\//, '').replace(/^"|"$/g, '');
}

function isNotFound(error: unknown): boolean {
  return error instanceof S3ServiceException && (error.$metadata.httpStatusCode === 404 || error.name === 'NotFound' || error.name === 'NoSuchKey');
}

function isPreconditionFailed(error: unknown): boolean {
  return error instanceof S3ServiceException && (error.$metadata.httpStatusCode === 412 || error.name === 'PreconditionFailed');
}

export class S3ObjectStore implements ObjectStore {
  private constructor(
    readonly location: string,
    private readonly client: S3Client,
    private readonly bucket: string,
    /** '' or 'some/prefix/' */
    private readonly prefix: string,
  ) {}

  static create(location: string, options: ObjectStoreOptions): S3ObjectStore {
    const m = /^s3:\/\/([^/]+)\/?(.*)$/i.exec(location);
    if (!m) throw new SourceError(`location ${location}: expected s3://bucket[/prefix]`, { context: { phase: 'connect' } });
    const prefix = m[2] ? `${m[2].replace(/\/+$/, '')}/` : '';
    const client = new S3Client({
      region: options.region ?? 'us-east-1',
      ...(options.endpoint !== undefined ? { endpoint: options.endpoint } : {}),
      forcePathStyle: options.forcePathStyle ?? options.endpoint !== undefined,
      ...(options.credentials ? { credentials: { ...options.credentials } } : {}),
    });
    return new S3ObjectStore(location, client, m[1]!, prefix);
  }

  describe(key: string): string {
    return `s3://${this.bucket}/${this.prefix}${key}`;
  }

  localPath(): undefined {
    return undefined;
  }

  private fail(what: string, key: string, error: unknown): never {
    const status = error instanceof S3ServiceException ? ` (HTTP ${error.$metadata.httpStatusCode ?? '?'} ${error.name})` : '';
    // The SDK's words name no setting; say which ones tidemark and the SDK read.
    if ((error as Error).name === 'CredentialsProviderError') {
      throw new SourceError(
        `${what} ${this.describe(key)} failed: no credentials for the bucket (set credentials: in the bucket's settings, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or an AWS profile)`,
        { cause: error, retryable: false },
      );
    }
    throw new SourceError(`${what} ${this.describe(key)} failed: ${(error as Error).message}${status}`, {
      cause: error,
      retryable: !(error instanceof S3ServiceException) || (error.$metadata.httpStatusCode ?? 500) >= 500,
    });
  }

  async *list(prefix = '', signal?: AbortSignal): AsyncIterable<ObjectInfo> {
    let token: string | undefined;
    do {
      let page;
      try {
        page = await this.client.send(
          new ListObjectsV2Command({ Bucket: this.bucket, Prefix: `${this.prefix}${prefix}`, ...(token ? { ContinuationToken: token } : {}) }),
          signal ? { abortSignal: signal } : {},
        );
      } catch (error) {
        this.fail('listing', prefix, error);
      }
      for (const o of page.Contents ?? []) {
        if (o.Key === undefined || o.Key.endsWith('/')) continue;
        yield {
          key: o.Key.slice(this.prefix.length),
          size: Number(o.Size ?? 0),
          modified: (o.LastModified ?? new Date(0)).toISOString(),
          ...(o.ETag !== undefined ? { etag: stripQuotes(o.ETag)! } : {}),
        };
      }
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token !== undefined);
  }

  async head(key: string): Promise<ObjectInfo | undefined> {
    try {
      const r = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: this.prefix + checkKey(key) }));
      return { key, size: Number(r.ContentLength ?? 0), modified: (r.LastModified ?? new Date(0)).toISOString(), ...(r.ETag ? { etag: stripQuotes(r.ETag)! } : {}) };
    } catch (error) {
      if (isNotFound(error)) return undefined;
      this.fail('HEAD of', key, error);
    }
  }

  async download(key: string, file: string, signal?: AbortSignal): Promise<ObjectInfo> {
    try {
      const r = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: this.prefix + checkKey(key) }), signal ? { abortSignal: signal } : {});
      await writeBodyToFile(r.Body, file, signal);
      const size = (await stat(file)).size;
      return { key, size, modified: (r.LastModified ?? new Date(0)).toISOString(), ...(r.ETag ? { etag: stripQuotes(r.ETag)! } : {}) };
    } catch (error) {
      if (isNotFound(error)) throw new SourceError(`${this.describe(key)} does not exist (it was listed; deleted meanwhile?)`, { cause: error });
      this.fail('download of', key, error);
    }
  }

  async get(key: string): Promise<{ body: Uint8Array; info: ObjectInfo } | undefined> {
    try {
      const r = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: this.prefix + checkKey(key) }));
      const body = await r.Body!.transformToByteArray();
      return {
        body,
        info: { key, size: body.length, modified: (r.LastModified ?? new Date(0)).toISOString(), ...(r.ETag ? { etag: stripQuotes(r.ETag)! } : {}) },
      };
    } catch (error) {
      if (isNotFound(error)) return undefined;
      this.fail('GET of', key, error);
    }
  }

  async put(key: string, body: Uint8Array | string, options: PutOptions = {}): Promise<ObjectInfo> {
    try {
      const r = await this.client.send(
        new PutObjectCommand({
          Bucket: this.bucket,
          Key: this.prefix + checkKey(key),
          Body: typeof body === 'string' ? Buffer.from(body) : body,
          ...(options.ifNoneMatch ? { IfNoneMatch: options.ifNoneMatch } : {}),
          ...(options.ifMatch ? { IfMatch: `"${options.ifMatch}"` } : {}),
          ...(options.contentType ? { ContentType: options.contentType } : {}),
        }),
      );
      return { key, size: typeof body === 'string' ? Buffer.byteLength(body) : body.length, modified: new Date().toISOString(), ...(r.ETag ? { etag: stripQuotes(r.ETag)! } : {}) };
    } catch (error) {
      if (isPreconditionFailed(error)) throw new ConflictError(`${this.describe(key)} changed or exists (conditional write refused)`, { cause: error });
      this.fail('PUT of', key, error);
    }
  }

  async upload(key: string, file: string, options: Omit<PutOptions, 'ifMatch'> = {}): Promise<ObjectInfo> {
    try {
      const upload = new Upload({
        client: this.client,
        params: {
          Bucket: this.bucket,
          Key: this.prefix + checkKey(key),
          Body: createReadStream(file),
          ...(options.ifNoneMatch ? { IfNoneMatch: options.ifNoneMatch } : {}),
          ...(options.contentType ? { ContentType: options.contentType } : {}),
        },
      });
      const r = await upload.done();
      const size = (await stat(file)).size;
      return { key, size, modified: new Date().toISOString(), ...(r.ETag ? { etag: stripQuotes(r.ETag)! } : {}) };
    } catch (error) {
      if (isPreconditionFailed(error)) throw new ConflictError(`${this.describe(key)} exists (conditional write refused)`, { cause: error });
      this.fail('upload of', key, error);
    }
  }

  async delete(key: string): Promise<void> {
    try {
      await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: this.prefix + checkKey(key) }));
    } catch (error) {
      if (isNotFound(error)) return;
      this.fail('DELETE of', key, error);
    }
  }

  async close(): Promise<void> {
    this.client.destroy();
  }
}
