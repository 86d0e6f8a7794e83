// The one place that speaks HTTP (Node's own fetch): the bearer token on
// every request, and every non-2xx answer turned into a TinyboxError.

import { ConnectionFailedError, TinyboxError, refusal } from './errors.js';

export const URL_VAR = 'TINYBOX_API_URL';
export const TOKEN_VAR = 'TINYBOX_API_TOKEN';

export interface ClientOptions {
  /** Default: `TINYBOX_API_URL` (`eval "$(tinybox serve env)"` sets it). */
  apiUrl?: string;
  /** Default: `TINYBOX_API_TOKEN`. */
  token?: string;
}

/** Where the server is and the token it takes. */
export class Client {
  readonly apiUrl: string;
  readonly token: string;

  constructor(opts: ClientOptions = {}) {
    const apiUrl = opts.apiUrl ?? process.env[URL_VAR];
    const token = opts.token ?? process.env[TOKEN_VAR];
    if (!apiUrl) throw new TinyboxError(`no server address: pass apiUrl or set ${URL_VAR} (eval "$(tinybox serve env)")`);
    if (!token) throw new TinyboxError(`no token: pass token or set ${TOKEN_VAR} (eval "$(tinybox serve env)")`);
    if (!/^https?:\/\/[^/]+/.test(apiUrl)) {
      throw new TinyboxError(`apiUrl ${JSON.stringify(apiUrl)} is not an http:// or https:// URL (like http://127.0.0.1:49982)`);
    }
    this.apiUrl = apiUrl.replace(/\/+$/, '');
    this.token = token;
  }

  async send(
    method: string,
    path: string,
    opts: { query?: Record<string, string>; body?: Uint8Array | string; contentType?: string } = {},
  ): Promise<Response> {
    let url = this.apiUrl + path;
    if (opts.query) url += '?' + new URLSearchParams(opts.query).toString();
    const headers: Record<string, string> = { Authorization: `Bearer ${this.token}`, Accept: 'application/json' };
    if (opts.contentType) headers['Content-Type'] = opts.contentType;
    let resp: Response;
    try {
      resp = await fetch(url, { method, headers, body: opts.body });
    } catch (e) {
      throw new ConnectionFailedError(`cannot reach tinybox serve at ${this.apiUrl}: ${describe(e)}`);
    }
    if (resp.status >= 300) throw await refusalOf(resp);
    return resp;
  }

  async json<T = unknown>(method: string, path: string, body?: unknown, query?: Record<string, string>): Promise<T> {
    const resp = await this.send(method, path, {
      query,
      body: body === undefined ? undefined : JSON.stringify(body),
      contentType: body === undefined ? undefined : 'application/json',
    });
    return (await resp.json()) as T;
  }

  async bytes(method: string, path: string, query: Record<string, string>, body?: Uint8Array): Promise<Uint8Array> {
    const contentType = body === undefined ? undefined : 'application/octet-stream';
    const resp = await this.send(method, path, { query, body, contentType });
    return new Uint8Array(await resp.arrayBuffer());
  }

  /** POSTs `body` and yields each JSON line of the answer as it comes. */
  async *lines(path: string, body: unknown): AsyncGenerator<Record<string, unknown>> {
    const resp = await this.send('POST', path, { body: JSON.stringify(body), contentType: 'application/json' });
    if (!resp.body) return;
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let pending = '';
    try {
      for (;;) {
        let got: Awaited<ReturnType<typeof reader.read>>;
        try {
          got = await reader.read();
        } catch (e) {
          throw new ConnectionFailedError(`the stream from ${this.apiUrl} broke off: ${describe(e)}`);
        }
        if (got.done) break;
        pending += decoder.decode(got.value, { stream: true });
        let eol: number;
        while ((eol = pending.indexOf('\n')) >= 0) {
          const line = pending.slice(0, eol).trim();
          pending = pending.slice(eol + 1);
          if (line) yield JSON.parse(line) as Record<string, unknown>;
        }
      }
      if (pending.trim()) yield JSON.parse(pending) as Record<string, unknown>;
    } finally {
      await reader.cancel().catch(() => undefined);
    }
  }
}

function describe(e: unknown): string {
  if (e instanceof Error) {
    const cause = (e as Error & { cause?: unknown }).cause;
    return cause instanceof Error ? `${e.message} (${cause.message})` : e.message;
  }
  return String(e);
}

async function refusalOf(resp: Response): Promise<TinyboxError> {
  const text = await resp.text();
  try {
    const err = (JSON.parse(text) as { error: { kind?: string; message?: string } }).error;
    return refusal(resp.status, err.kind, err.message ?? '');
  } catch {
    return refusal(resp.status, undefined, text.trim() || `HTTP ${resp.status} with no error body`);
  }
}
