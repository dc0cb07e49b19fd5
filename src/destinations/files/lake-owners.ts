/**
 * Which pipeline owns a stream's directory in a lake. Data objects live under `<location>/<stream>/`, shared by
 * every pipeline that writes there, and a run collects what its own manifest does not name under its streams'
 * directories: two pipelines writing one stream name would delete each other's committed objects. So the first
 * pipeline to write a stream claims it with `_tidemark/owners/<stream>.json` (a create-only write: one of two
 * racing pipelines wins), and every other pipeline is refused, at `validate` and at `run`, before it writes or
 * removes anything.
 *
 * A lake written before claims existed has none: the pipeline whose committed manifest names the stream owns it
 * (and the claim is written for it the first time anyone asks), so existing lakes keep working unchanged.
 */
import { ConfigError, ConflictError } from '../../core/errors.js';
import { checkName } from './lake-layout.js';
import type { Lake } from './lake.js';

interface OwnerDocument {
  readonly format: 'tidemark-lake-owner';
  readonly stream: string;
  readonly pipeline: string;
  readonly claimedAt: string;
}

export const ownerKey = (stream: string) => `_tidemark/owners/${stream}.json`;

export class LakeOwners {
  private readonly known = new Map<string, string>();

  constructor(private readonly lake: Lake) {}

  /** The claimed owner of a stream, or (an older lake) the pipeline whose committed manifest names it; undefined when free. */
  async ownerOf(stream: string, asking?: string): Promise<string | undefined> {
    const cached = this.known.get(stream);
    if (cached !== undefined) return cached;
    const claimed = await this.readClaim(stream);
    if (claimed !== undefined) {
      this.known.set(stream, claimed);
      return claimed;
    }
    const writers: string[] = [];
    for (const pipeline of await this.lake.pipelines()) {
      const { manifest } = await this.lake.head(pipeline);
      if (manifest.tables[stream] !== undefined || manifest.builds[stream] !== undefined) writers.push(pipeline);
    }
    // Two pipelines that already collided before claims existed: the asking one keeps what it has.
    return asking !== undefined && writers.includes(asking) ? asking : writers[0];
  }

  /**
   * Makes `pipeline` the owner of `stream` here, or refuses with a message naming both pipelines. Called before a
   * load writes or collects anything.
   */
  async claim(pipeline: string, stream: string): Promise<void> {
    checkName('stream', stream);
    let owner = await this.ownerOf(stream, pipeline);
    if (!this.known.has(stream)) {
      owner = await this.writeClaim(stream, owner ?? pipeline);
      this.known.set(stream, owner);
    }
    if (owner !== pipeline) throw new ConfigError(ownershipMessage(this.lake.store.describe(''), stream, owner!, pipeline), { context: { pipeline, stream, phase: 'plan' } });
  }

  /** Whether a run of `pipeline` may collect under the stream's directory: only its owner's runs may. */
  async owns(pipeline: string, stream: string): Promise<boolean> {
    const owner = await this.ownerOf(stream, pipeline);
    return owner === undefined || owner === pipeline;
  }

  private async readClaim(stream: string): Promise<string | undefined> {
    const got = await this.lake.store.get(ownerKey(stream));
    if (got === undefined) return undefined;
    try {
      const doc = JSON.parse(Buffer.from(got.body).toString('utf8')) as Partial<OwnerDocument>;
      if (doc.format === 'tidemark-lake-owner' && typeof doc.pipeline === 'string') return doc.pipeline;
    } catch {
      // A torn claim is rewritten below by whoever owns the stream by its manifests.
    }
    return undefined;
  }

  /** Writes the claim create-only; a concurrent claim that won first is returned instead. */
  private async writeClaim(stream: string, pipeline: string): Promise<string> {
    const doc: OwnerDocument = { format: 'tidemark-lake-owner', stream, pipeline, claimedAt: new Date().toISOString() };
    try {
      await this.lake.store.put(ownerKey(stream), `${JSON.stringify(doc)}\n`, { ifNoneMatch: '*', contentType: 'application/json' });
      await this.lake.sync(ownerKey(stream));
    } catch (error) {
      if (!(error instanceof ConflictError)) throw error;
    }
    // Read back: on a server that ignores conditional writes the last writer wins, and this is who that was.
    return (await this.readClaim(stream)) ?? pipeline;
  }
}

export function ownershipMessage(location: string, stream: string, owner: string, other: string): string {
  return (
    `stream ${stream} in ${location} belongs to pipeline ${owner}; pipeline ${other} writes a stream of the same name there, ` +
    `which would replace and delete ${owner}'s objects. Give ${other}'s stream another name (name:) or another location`
  );
}

/** What `validate` can tell before a run: streams of `pipeline` that another pipeline owns in this lake. */
export async function ownershipProblems(lake: Lake, pipeline: string, streams: readonly string[]): Promise<string[]> {
  const owners = new LakeOwners(lake);
  const out: string[] = [];
  for (const stream of streams) {
    const owner = await owners.ownerOf(stream, pipeline);
    if (owner !== undefined && owner !== pipeline) out.push(ownershipMessage(lake.store.describe(''), stream, owner, pipeline));
  }
  return out;
}
