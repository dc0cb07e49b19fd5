/**
 * The pgoutput logical replication protocol (version 1), as the walsender sends it inside CopyData frames, and the
 * standby status message tidemark answers with. Values arrive in the server's text output form; turning them into
 * canonical values is the caller's business (the same decoders as the table source's COPY text).
 */

/** LSNs travel as 64-bit integers; tidemark writes them as 16 hex digits so that string order is LSN order. */
export function lsnPosition(lsn: bigint): string {
  return lsn.toString(16).toUpperCase().padStart(16, '0');
}

export function positionLsn(position: string): bigint {
  if (!/^[0-9A-F]{16}$/.test(position)) throw new Error(`not a Postgres log position: ${JSON.stringify(position)}`);
  return BigInt(`0x${position}`);
}

/** `16/B374D848`, as Postgres prints an LSN. */
export function pgLsnText(lsn: bigint): string {
  return `${(lsn >> 32n).toString(16).toUpperCase()}/${(lsn & 0xffffffffn).toString(16).toUpperCase()}`;
}

export function parsePgLsn(text: string): bigint {
  const m = /^([0-9A-Fa-f]+)\/([0-9A-Fa-f]+)$/.exec(text);
  if (!m) throw new Error(`not an LSN: ${JSON.stringify(text)}`);
  return (BigInt(`0x${m[1]}`) << 32n) | BigInt(`0x${m[2]}`);
}

/** Microseconds since 2000-01-01 UTC (Postgres' epoch) → `YYYY-MM-DDTHH:MM:SS.ffffffZ`. */
export function pgTimestampText(micros: bigint): string {
  const unix = micros + 946_684_800_000_000n;
  const ms = unix / 1000n;
  const rest = Number(unix % 1000n);
  const iso = new Date(Number(ms)).toISOString();
  return `${iso.slice(0, 23)}${String(rest).padStart(3, '0')}Z`;
}

/** One column's value in a tuple: null, unchanged TOAST (not sent), or its text. */
export type TupleValue = null | undefined | string;

export interface RelationColumn {
  readonly name: string;
  readonly typeOid: number;
  readonly typmod: number;
  readonly key: boolean;
}

export type PgOutputMessage =
  | { readonly tag: 'begin'; readonly finalLsn: bigint; readonly commitTime: bigint; readonly xid: number }
  | { readonly tag: 'commit'; readonly commitLsn: bigint; readonly endLsn: bigint; readonly commitTime: bigint }
  | { readonly tag: 'relation'; readonly relid: number; readonly namespace: string; readonly name: string; readonly replicaIdentity: string; readonly columns: readonly RelationColumn[] }
  | { readonly tag: 'insert'; readonly relid: number; readonly tuple: readonly TupleValue[] }
  | { readonly tag: 'update'; readonly relid: number; readonly old?: readonly TupleValue[]; readonly oldIsKey: boolean; readonly tuple: readonly TupleValue[] }
  | { readonly tag: 'delete'; readonly relid: number; readonly old: readonly TupleValue[]; readonly oldIsKey: boolean }
  | { readonly tag: 'truncate'; readonly relids: readonly number[] }
  | { readonly tag: 'message'; readonly transactional: boolean; readonly lsn: bigint; readonly prefix: string; readonly content: Buffer }
  | { readonly tag: 'other' };

class Reader {
  private at = 0;
  constructor(private readonly buf: Buffer) {}
  u8(): number {
    return this.buf.readUInt8(this.at++);
  }
  i16(): number {
    const v = this.buf.readInt16BE(this.at);
    this.at += 2;
    return v;
  }
  i32(): number {
    const v = this.buf.readInt32BE(this.at);
    this.at += 4;
    return v;
  }
  u32(): number {
    const v = this.buf.readUInt32BE(this.at);
    this.at += 4;
    return v;
  }
  u64(): bigint {
    const v = this.buf.readBigUInt64BE(this.at);
    this.at += 8;
    return v;
  }
  i64(): bigint {
    const v = this.buf.readBigInt64BE(this.at);
    this.at += 8;
    return v;
  }
  bytes(n: number): Buffer {
    const b = this.buf.subarray(this.at, this.at + n);
    this.at += n;
    return b;
  }
  cstring(): string {
    const end = this.buf.indexOf(0, this.at);
    const s = this.buf.toString('utf8', this.at, end);
    this.at = end + 1;
    return s;
  }
  tuple(): TupleValue[] {
    const n = this.i16();
    const values: TupleValue[] = new Array<TupleValue>(n);
    for (let i = 0; i < n; i += 1) {
      const kind = this.u8();
      if (kind === 0x6e /* n */) values[i] = null;
      else if (kind === 0x75 /* u */) values[i] = undefined;
      else if (kind === 0x74 /* t */) {
        const len = this.i32();
        values[i] = this.buf.toString('utf8', this.at, this.at + len);
        this.at += len;
      } else throw new Error(`pgoutput: unexpected tuple value kind ${String.fromCharCode(kind)} (binary mode is not used)`);
    }
    return values;
  }
}

/** Decodes the payload of one XLogData message. */
export function decodePgOutput(data: Buffer): PgOutputMessage {
  const r = new Reader(data);
  const tag = String.fromCharCode(r.u8());
  switch (tag) {
    case 'B':
      return { tag: 'begin', finalLsn: r.u64(), commitTime: r.i64(), xid: r.u32() };
    case 'C': {
      r.u8();
      return { tag: 'commit', commitLsn: r.u64(), endLsn: r.u64(), commitTime: r.i64() };
    }
    case 'R': {
      const relid = r.u32();
      const namespace = r.cstring();
      const name = r.cstring();
      const replicaIdentity = String.fromCharCode(r.u8());
      const n = r.i16();
      const columns: RelationColumn[] = [];
      for (let i = 0; i < n; i += 1) {
        const flags = r.u8();
        columns.push({ key: (flags & 1) === 1, name: r.cstring(), typeOid: r.u32(), typmod: r.i32() });
      }
      return { tag: 'relation', relid, namespace, name: name, replicaIdentity, columns };
    }
    case 'I': {
      const relid = r.u32();
      r.u8(); // 'N'
      return { tag: 'insert', relid, tuple: r.tuple() };
    }
    case 'U': {
      const relid = r.u32();
      let kind = String.fromCharCode(r.u8());
      let old: TupleValue[] | undefined;
      let oldIsKey = false;
      if (kind === 'K' || kind === 'O') {
        oldIsKey = kind === 'K';
        old = r.tuple();
        kind = String.fromCharCode(r.u8());
      }
      return { tag: 'update', relid, ...(old ? { old } : {}), oldIsKey, tuple: r.tuple() };
    }
    case 'D': {
      const relid = r.u32();
      const kind = String.fromCharCode(r.u8());
      return { tag: 'delete', relid, oldIsKey: kind === 'K', old: r.tuple() };
    }
    case 'T': {
      const n = r.u32();
      r.u8();
      const relids: number[] = [];
      for (let i = 0; i < n; i += 1) relids.push(r.u32());
      return { tag: 'truncate', relids };
    }
    case 'M': {
      const flags = r.u8();
      const lsn = r.u64();
      const prefix = r.cstring();
      const length = r.u32();
      return { tag: 'message', transactional: (flags & 1) === 1, lsn, prefix, content: r.bytes(length) };
    }
    default:
      // 'Y' type, 'O' origin: nothing tidemark needs (types are looked up by oid).
      return { tag: 'other' };
  }
}

/** A CopyData frame of the replication stream: WAL data, or a keepalive. */
export type ReplicationFrame =
  | { readonly kind: 'data'; readonly walStart: bigint; readonly walEnd: bigint; readonly payload: Buffer }
  | { readonly kind: 'keepalive'; readonly walEnd: bigint; readonly replyRequested: boolean }
  | { readonly kind: 'other' };

export function decodeFrame(frame: Buffer): ReplicationFrame {
  const tag = frame[0];
  if (tag === 0x77 /* w */) return { kind: 'data', walStart: frame.readBigUInt64BE(1), walEnd: frame.readBigUInt64BE(9), payload: frame.subarray(25) };
  if (tag === 0x6b /* k */) return { kind: 'keepalive', walEnd: frame.readBigUInt64BE(1), replyRequested: frame[17] === 1 };
  return { kind: 'other' };
}

/** Standby status update: everything up to `flushed` is durable on the client. */
export function statusUpdate(flushed: bigint, replyRequested: boolean): Buffer {
  const b = Buffer.alloc(34);
  b.write('r', 0);
  b.writeBigUInt64BE(flushed, 1);
  b.writeBigUInt64BE(flushed, 9);
  b.writeBigUInt64BE(flushed, 17);
  const now = BigInt(Date.now()) * 1000n - 946_684_800_000_000n;
  b.writeBigInt64BE(now, 25);
  b.writeUInt8(replyRequested ? 1 : 0, 33);
  return b;
}
