// A box on a `tinybox serve`, shaped after E2B's Sandbox (Sandbox.create(),
// box.commands.run(), box.files.read(), box.kill()), with what confines it
// in plain sight: every box object carries its isolation, whether that was
// verified, and the limits and network in force, as the server reported them.

import { Client, type ClientOptions } from './client.js';
import { TinyboxError } from './errors.js';

export type Command = string | string[];

export interface RunOptions {
  envs?: Record<string, string>;
  cwd?: string;
  /** Text, or bytes (sent as base64). */
  stdin?: string | Uint8Array;
  /** At most the server's --timeout. */
  timeoutSecs?: number;
  /** With either callback the output is streamed to it as it comes. */
  onStdout?: (data: Uint8Array) => void;
  onStderr?: (data: Uint8Array) => void;
}

/** How a command ended and what it printed. */
export class CommandResult {
  constructor(
    readonly exitCode: number | null,
    readonly signal: number | null,
    readonly timedOut: boolean,
    readonly stdoutBytes: Uint8Array,
    readonly stderrBytes: Uint8Array,
    readonly stdoutTruncated = false,
    readonly stderrTruncated = false,
    readonly stdoutDroppedBytes = 0,
    readonly stderrDroppedBytes = 0,
  ) {}

  /** stdout as UTF-8 text (undecodable bytes replaced; `stdoutBytes` has them). */
  get stdout(): string {
    return new TextDecoder().decode(this.stdoutBytes);
  }

  get stderr(): string {
    return new TextDecoder().decode(this.stderrBytes);
  }

  get ok(): boolean {
    return this.exitCode === 0 && !this.timedOut;
  }
}

/** A piece of a streamed command's output, as it came. */
export interface OutputChunk {
  stream: 'stdout' | 'stderr';
  data: Uint8Array;
}

const b64 = (s: unknown): Uint8Array => new Uint8Array(Buffer.from(typeof s === 'string' ? s : '', 'base64'));

const concat = (parts: Uint8Array[]): Uint8Array => new Uint8Array(Buffer.concat(parts));

function argvOf(cmd: Command): string[] {
  // A string is a shell line, as E2B's commands.run takes it; an array is
  // the program and its arguments exactly, with no shell between.
  if (typeof cmd === 'string') return ['/bin/sh', '-c', cmd];
  if (!Array.isArray(cmd) || cmd.length === 0 || !cmd.every((a) => typeof a === 'string')) {
    throw new TinyboxError(`command ${JSON.stringify(cmd)} is neither a shell line nor a non-empty array of strings`);
  }
  return [...cmd];
}

/** A running command's output, iterated as it comes; `result` once it ended. */
export class CommandStream implements AsyncIterable<OutputChunk> {
  result?: CommandResult;

  constructor(private readonly lines: AsyncGenerator<Record<string, unknown>>) {}

  async *[Symbol.asyncIterator](): AsyncIterator<OutputChunk> {
    const out: Uint8Array[] = [];
    const err: Uint8Array[] = [];
    for await (const line of this.lines) {
      if ('stdout' in line) {
        const data = b64(line.stdout);
        out.push(data);
        yield { stream: 'stdout', data };
      } else if ('stderr' in line) {
        const data = b64(line.stderr);
        err.push(data);
        yield { stream: 'stderr', data };
      } else if ('error' in line) {
        const e = line.error as { kind?: string; message?: string };
        throw new TinyboxError(e.message ?? '', undefined, e.kind);
      } else {
        this.result = new CommandResult(
          (line.exit_code as number | null) ?? null,
          (line.signal as number | null) ?? null,
          Boolean(line.timed_out),
          concat(out),
          concat(err),
        );
      }
    }
    if (!this.result) throw new TinyboxError("the command's stream ended without saying how the command ended");
  }

  /** Reads what is left and returns how the command ended. */
  async wait(): Promise<CommandResult> {
    for await (const _ of this) {
      // drained
    }
    return this.result as CommandResult;
  }
}

/** `box.commands`: run a command, buffered or streamed. */
export class Commands {
  constructor(private readonly box: Sandbox) {}

  private body(cmd: Command, opts: RunOptions): Record<string, unknown> {
    const body: Record<string, unknown> = { argv: argvOf(cmd) };
    if (opts.envs) body.env = opts.envs;
    if (opts.cwd !== undefined) body.cwd = opts.cwd;
    if (typeof opts.stdin === 'string') body.stdin = opts.stdin;
    else if (opts.stdin !== undefined) body.stdin_base64 = Buffer.from(opts.stdin).toString('base64');
    if (opts.timeoutSecs !== undefined) body.timeout_secs = opts.timeoutSecs;
    return body;
  }

  /**
   * Runs `cmd` (a shell line, or an argv array) and resolves when it ends.
   * A non-zero exit is a result, not an exception.
   */
  async run(cmd: Command, opts: RunOptions = {}): Promise<CommandResult> {
    const body = this.body(cmd, opts);
    if (opts.onStdout || opts.onStderr) {
      const stream = new CommandStream(this.box.client.lines(this.box.path('/exec/stream'), body));
      for await (const chunk of stream) {
        (chunk.stream === 'stdout' ? opts.onStdout : opts.onStderr)?.(chunk.data);
      }
      return stream.result as CommandResult;
    }
    const v = await this.box.client.json<Record<string, unknown>>('POST', this.box.path('/exec'), body);
    return new CommandResult(
      (v.exit_code as number | null) ?? null,
      (v.signal as number | null) ?? null,
      Boolean(v.timed_out),
      b64(v.stdout_base64),
      b64(v.stderr_base64),
      Boolean(v.stdout_truncated),
      Boolean(v.stderr_truncated),
      Number(v.stdout_dropped_bytes ?? 0),
      Number(v.stderr_dropped_bytes ?? 0),
    );
  }

  /** Starts `cmd`; iterate the answer (`for await`) for its output as it comes. */
  stream(cmd: Command, opts: Omit<RunOptions, 'onStdout' | 'onStderr'> = {}): CommandStream {
    return new CommandStream(this.box.client.lines(this.box.path('/exec/stream'), this.body(cmd, opts)));
  }
}

/** One entry of a listed directory. */
export interface EntryInfo {
  name: string;
  kind: 'file' | 'dir' | 'symlink' | 'other';
  size: number;
  mode: number;
  mtime: number;
}

/** `box.files`: read, write and list, binary-safe. */
export class Files {
  constructor(private readonly box: Sandbox) {}

  /** The file as UTF-8 text (strict: a file that is not UTF-8 throws), or its bytes. */
  read(path: string): Promise<string>;
  read(path: string, opts: { format: 'text' }): Promise<string>;
  read(path: string, opts: { format: 'bytes' }): Promise<Uint8Array>;
  async read(path: string, opts: { format?: 'text' | 'bytes' } = {}): Promise<string | Uint8Array> {
    const data = await this.box.client.bytes('GET', this.box.path('/files'), { path });
    if (opts.format === 'bytes') return data;
    try {
      return new TextDecoder('utf-8', { fatal: true }).decode(data);
    } catch {
      throw new TinyboxError(`${path} is not UTF-8 text: read it with { format: 'bytes' }`);
    }
  }

  /** Creates or replaces `path` (text is written as UTF-8); `mode` as permission bits (0o644). */
  async write(path: string, data: string | Uint8Array, opts: { mode?: number } = {}): Promise<{ path: string; bytes: number }> {
    const raw = typeof data === 'string' ? new TextEncoder().encode(data) : data;
    const query: Record<string, string> = { path };
    if (opts.mode !== undefined) query.mode = opts.mode.toString(8);
    await this.box.client.bytes('PUT', this.box.path('/files'), query, raw);
    return { path, bytes: raw.length };
  }

  async list(path: string): Promise<EntryInfo[]> {
    return this.box.client.json<EntryInfo[]>('GET', this.box.path('/dir'), undefined, { path });
  }
}

export interface CreateOptions extends ClientOptions {
  ttlSecs?: number;
  /** Bytes, or text such as "512M". */
  memory?: number | string;
  pids?: number;
  cpus?: number;
  network?: 'deny' | 'egress';
  image?: string;
  client?: Client;
}

export interface Snapshot {
  id: string;
  taken_at?: number;
}

/** The box JSON the server answers with (docs/specs/http-api.yml's Box). */
export type BoxJson = Record<string, unknown> & { id: string };

/**
 * A box this server made, with what confines it: `isolation` (none,
 * process, kernel, hardware), `verified` (its sandbox's declaration passed
 * the conformance kit), `suitableForUntrustedCode`, `network` and `limits`
 * are what is in force, as the server says, not what was asked for.
 */
export class Sandbox {
  readonly commands: Commands = new Commands(this);
  readonly files: Files = new Files(this);
  id!: string;
  sandbox?: string;
  host?: string;
  isolation?: string;
  verified = false;
  suitableForUntrustedCode = false;
  network?: unknown;
  limits: Record<string, unknown> = {};
  lifecycle?: unknown;
  createdAt?: number;
  expiresAt?: number;
  workdir?: string;
  state?: string;
  warnings: string[] = [];
  raw!: BoxJson;

  private constructor(readonly client: Client, v: BoxJson) {
    this.update(v);
  }

  private update(v: BoxJson): void {
    this.raw = v;
    this.id = v.id;
    this.sandbox = v.sandbox as string | undefined;
    this.host = v.host as string | undefined;
    this.isolation = v.isolation as string | undefined;
    this.verified = Boolean(v.verified);
    this.suitableForUntrustedCode = Boolean(v.suitable_for_untrusted_code);
    this.network = v.network;
    this.limits = (v.limits as Record<string, unknown> | undefined) ?? {};
    this.lifecycle = v.lifecycle;
    this.createdAt = v.created_at as number | undefined;
    this.expiresAt = v.expires_at as number | undefined;
    this.workdir = v.workdir as string | undefined;
    this.state = v.state as string | undefined;
    if (Array.isArray(v.warnings)) this.warnings = v.warnings as string[];
  }

  /** @internal */
  path(tail = ''): string {
    return `/v1/boxes/${encodeURIComponent(this.id)}${tail}`;
  }

  /** Makes a box under the operator's ceiling (what is unset is the ceiling's; asking over it is refused, never cut). */
  static async create(opts: CreateOptions = {}): Promise<Sandbox> {
    const client = opts.client ?? new Client(opts);
    const ask: Record<string, unknown> = {
      ttl_secs: opts.ttlSecs,
      memory: opts.memory,
      pids: opts.pids,
      cpus: opts.cpus,
      network: opts.network,
      image: opts.image,
    };
    for (const k of Object.keys(ask)) if (ask[k] === undefined) delete ask[k];
    return new Sandbox(client, await client.json<BoxJson>('POST', '/v1/boxes', ask));
  }

  /** The box `id` of this server, inspected now. */
  static async connect(id: string, opts: ClientOptions & { client?: Client } = {}): Promise<Sandbox> {
    const client = opts.client ?? new Client(opts);
    return new Sandbox(client, await client.json<BoxJson>('GET', `/v1/boxes/${encodeURIComponent(id)}`));
  }

  /** The boxes this server made. */
  static async list(opts: ClientOptions & { client?: Client } = {}): Promise<Sandbox[]> {
    const client = opts.client ?? new Client(opts);
    return (await client.json<BoxJson[]>('GET', '/v1/boxes')).map((v) => new Sandbox(client, v));
  }

  /** Reads the box again (its `state` now). */
  async refresh(): Promise<this> {
    this.update(await this.client.json<BoxJson>('GET', this.path()));
    return this;
  }

  /** Runs `argv` as given (no shell): `commands.run` with an array. */
  exec(argv: string[], opts: RunOptions = {}): Promise<CommandResult> {
    return this.commands.run(argv, opts);
  }

  /** Snapshots the box where its sandbox declared snapshots (elsewhere: UnsupportedError with core's refusal). */
  snapshot(): Promise<Snapshot> {
    return this.client.json<Snapshot>('POST', this.path('/snapshots'));
  }

  /** Removes the box and everything in it. */
  async kill(): Promise<void> {
    await this.client.json('DELETE', this.path());
  }
}
