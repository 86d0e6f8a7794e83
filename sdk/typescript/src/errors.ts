// What a refusal looks like to a caller: an exception carrying the
// server's status, its error kind and its one line (`tinybox: ...`).

export class TinyboxError extends Error {
  /** The HTTP status; `undefined` when the server was never reached. */
  readonly status?: number;
  /** The server's error word: `invalid`, `unsupported`, `box_not_found`, ... */
  readonly kind?: string;

  constructor(message: string, status?: number, kind?: string) {
    super(message);
    this.name = new.target.name;
    this.status = status;
    this.kind = kind;
  }
}

/** 401: no token, or not this server's (`tinybox serve env` prints it). */
export class AuthenticationError extends TinyboxError {}
/** 400: a value broke a rule (over the operator's ceiling, a bad body). */
export class InvalidRequestError extends TinyboxError {}
/** 404: no such box made by this server, or no such file in it. */
export class NotFoundError extends TinyboxError {}
/** 409: the box is not ready for that yet. */
export class ConflictError extends TinyboxError {}
/** 422: the box's sandbox did not declare what was asked (a snapshot). */
export class UnsupportedError extends TinyboxError {}
/** The server could not be reached, or broke off its answer. */
export class ConnectionFailedError extends TinyboxError {}

const byStatus: Record<number, typeof TinyboxError> = {
  400: InvalidRequestError,
  401: AuthenticationError,
  404: NotFoundError,
  409: ConflictError,
  422: UnsupportedError,
};

/** The exception for a refusal the server answered with. */
export function refusal(status: number, kind: string | undefined, message: string): TinyboxError {
  const Class = byStatus[status] ?? TinyboxError;
  return new Class(message, status, kind);
}
