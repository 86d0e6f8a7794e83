// tinybox's own TypeScript SDK, thin over `tinybox serve`'s HTTP API
// (docs/specs/http-api.yml), on Node 20's fetch with no runtime
// dependencies. TINYBOX_API_URL and TINYBOX_API_TOKEN
// (`eval "$(tinybox serve env)"`) say where.

export { Client, type ClientOptions, TOKEN_VAR, URL_VAR } from './client.js';
export {
  AuthenticationError,
  ConflictError,
  ConnectionFailedError,
  InvalidRequestError,
  NotFoundError,
  TinyboxError,
  UnsupportedError,
} from './errors.js';
export {
  type BoxJson,
  type Command,
  CommandResult,
  CommandStream,
  Commands,
  type CreateOptions,
  type EntryInfo,
  Files,
  type OutputChunk,
  type RunOptions,
  Sandbox,
  type Snapshot,
} from './sandbox.js';
