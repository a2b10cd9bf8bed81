/**
 * The TypeScript client of engram's gRPC API: Connect clients over the gRPC protocol (HTTP/2,
 * `@connectrpc/connect-node`) for every engram service, generated from protos/ with buf
 * (protoc-gen-es), with a bearer token, TLS or mTLS, and failures thrown as {@link EngramError}
 * carrying the status's ErrorInfo reason and RetryInfo delay.
 *
 * ```ts
 * const engram = connect("127.0.0.1:50051", { token, caFile: "ca.pem" });
 * const { document } = await engram.storage.readDocument({ space, path: "MEMORY.md" });
 * engram.close();
 * ```
 */
import { readFileSync } from "node:fs";
import type * as http2 from "node:http2";

import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";

import { AuthzService } from "./gen/engram/v1/authz_pb.js";
import { IndexerService } from "./gen/engram/v1/indexer_pb.js";
import { MaintenanceService } from "./gen/engram/v1/maintenance_pb.js";
import { QuotaService } from "./gen/engram/v1/quota_pb.js";
import { SearchService } from "./gen/engram/v1/search_pb.js";
import { StorageService } from "./gen/engram/v1/storage_pb.js";
import { WorkspaceService } from "./gen/engram/v1/workspace_pb.js";
import { BadRequestSchema, ErrorInfoSchema, RetryInfoSchema } from "./gen/google/rpc/error_details_pb.js";

/** The ErrorInfo domain of engram's own errors. */
export const ERROR_DOMAIN = "engram.dev";

export interface ConnectOptions {
  /** A personal access token or a JWT, sent as `authorization: Bearer <token>`. */
  token?: string;
  /** TLS with the system's roots; `caFile`, `certFile` or `serverName` imply it. */
  tls?: boolean;
  /** A PEM bundle of the roots that verify the server (instead of the system's). */
  caFile?: string;
  /** The client's certificate and key (PEM) for an mTLS server. */
  certFile?: string;
  keyFile?: string;
  /** The name to verify the server's certificate against (default: the address's host). */
  serverName?: string;
  /** Each call's deadline in milliseconds unless the call sets `timeoutMs` (default: none). */
  timeoutMs?: number;
  /** More interceptors, run after the client's own. */
  interceptors?: Interceptor[];
}

/** One HTTP/2 connection to an engram server and a client for each of its services. */
export interface Engram {
  storage: Client<typeof StorageService>;
  search: Client<typeof SearchService>;
  workspace: Client<typeof WorkspaceService>;
  authz: Client<typeof AuthzService>;
  quota: Client<typeof QuotaService>;
  maintenance: Client<typeof MaintenanceService>;
  indexer: Client<typeof IndexerService>;
  /** Closes the connection (calls in flight fail), so the process can exit. */
  close(): void;
}

/** Opens a client to `address` (`host:port`); the connection is made on the first call. */
export function connect(address: string, options: ConnectOptions = {}): Engram {
  const secure = Boolean(options.tls || options.caFile || options.certFile || options.serverName);
  const baseUrl = `${secure ? "https" : "http"}://${address}`;
  const nodeOptions = secure ? tlsOptions(options) : {};
  const sessionManager = new Http2SessionManager(baseUrl, {}, nodeOptions);
  const interceptors: Interceptor[] = [decodeErrors];
  if (options.token) {
    interceptors.push(bearer(options.token));
  }
  const transport = createGrpcTransport({
    baseUrl,
    sessionManager,
    interceptors: [...interceptors, ...(options.interceptors ?? [])],
    defaultTimeoutMs: options.timeoutMs,
  });
  return {
    storage: createClient(StorageService, transport),
    search: createClient(SearchService, transport),
    workspace: createClient(WorkspaceService, transport),
    authz: createClient(AuthzService, transport),
    quota: createClient(QuotaService, transport),
    maintenance: createClient(MaintenanceService, transport),
    indexer: createClient(IndexerService, transport),
    close: () => sessionManager.abort(),
  };
}

/** The address `engram dev` serves on. */
export const DEFAULT_ADDR = "127.0.0.1:50051";

/**
 * The address and options the engram CLI would use from its environment: ENGRAM_ADDR,
 * ENGRAM_TOKEN, ENGRAM_TLS, ENGRAM_TLS_CA_FILE, ENGRAM_TLS_CLIENT_CERT_FILE,
 * ENGRAM_TLS_CLIENT_KEY_FILE and ENGRAM_TLS_SERVER_NAME.
 */
export function fromEnv(env: NodeJS.ProcessEnv = process.env): [string, ConnectOptions] {
  return [
    env.ENGRAM_ADDR || DEFAULT_ADDR,
    {
      token: env.ENGRAM_TOKEN || undefined,
      tls: ["1", "true", "yes", "on"].includes((env.ENGRAM_TLS ?? "").toLowerCase()),
      caFile: env.ENGRAM_TLS_CA_FILE || undefined,
      certFile: env.ENGRAM_TLS_CLIENT_CERT_FILE || undefined,
      keyFile: env.ENGRAM_TLS_CLIENT_KEY_FILE || undefined,
      serverName: env.ENGRAM_TLS_SERVER_NAME || undefined,
    },
  ];
}

function tlsOptions(options: ConnectOptions): http2.SecureClientSessionOptions {
  if (Boolean(options.certFile) !== Boolean(options.keyFile)) {
    throw new Error("engram: a client certificate needs both certFile and keyFile");
  }
  return {
    ca: options.caFile ? readFileSync(options.caFile) : undefined,
    cert: options.certFile ? readFileSync(options.certFile) : undefined,
    key: options.keyFile ? readFileSync(options.keyFile) : undefined,
    servername: options.serverName,
    minVersion: "TLSv1.2",
  };
}

/** Sends the token on every call; over plaintext too (`engram dev --auth` on loopback). */
function bearer(token: string): Interceptor {
  return (next) => async (req) => {
    req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
}

/**
 * A failed call: the status code and message, and what engram's details say (the
 * google.rpc.Status in the grpc-status-details-bin trailer). A ConnectError still, so
 * `findDetails` and `code` work as Connect documents them.
 */
export class EngramError extends ConnectError {
  /** The code's canonical name, as engram, its CLI and the Python client say it: `ABORTED`. */
  readonly codeName: string;
  /** ErrorInfo's reason (`ETAG_MISMATCH`, `RATE_LIMITED`, ...); "" without an engram ErrorInfo. */
  readonly reason: string;
  /** ErrorInfo's metadata, e.g. `current_sha256` for `ETAG_MISMATCH`. */
  readonly errorMetadata: Record<string, string>;
  /** RetryInfo's delay in milliseconds (`RATE_LIMITED`): wait that long; undefined without one. */
  readonly retryDelayMs: number | undefined;
  /** The BadRequest field a refused argument names; "" without one. */
  readonly field: string;

  /** Only errors made by this class (ConnectError's own check accepts any ConnectError). */
  static override [Symbol.hasInstance](value: unknown): boolean {
    return Function.prototype[Symbol.hasInstance].call(this, value);
  }

  constructor(error: ConnectError) {
    // Its name stays "ConnectError": Connect recognises its errors by name and would wrap one
    // named otherwise again, dropping what is decoded here.
    super(error.rawMessage, error.code, error.metadata, undefined, error);
    this.details.push(...error.details);
    const info = error.findDetails(ErrorInfoSchema).find((i) => i.domain === ERROR_DOMAIN);
    this.reason = info?.reason ?? "";
    this.errorMetadata = { ...(info?.metadata ?? {}) };
    const delay = error.findDetails(RetryInfoSchema)[0]?.retryDelay;
    this.retryDelayMs = delay ? Number(delay.seconds) * 1000 + delay.nanos / 1e6 : undefined;
    this.field = error.findDetails(BadRequestSchema)[0]?.fieldViolations[0]?.field ?? "";
    this.codeName = codeName(error.code);
    this.message = `${this.codeName}: ${error.rawMessage}${this.reason ? ` [${this.reason}]` : ""}`;
  }
}

/** `Code.InvalidArgument` -> `INVALID_ARGUMENT` (`Code.Canceled` -> `CANCELLED`, as gRPC). */
export function codeName(code: Code): string {
  if (code === Code.Canceled) {
    return "CANCELLED";
  }
  return (Code[code] ?? "UNKNOWN").replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}

/** Any error from a call as an EngramError (others, such as an abort, unchanged). */
export function engramError(error: unknown): unknown {
  if (error instanceof EngramError || !(error instanceof ConnectError)) {
    return error;
  }
  return new EngramError(error);
}

const decodeErrors: Interceptor = (next) => async (req) => {
  try {
    const res = await next(req);
    return res.stream ? { ...res, message: rethrowing(res.message) } : res;
  } catch (error) {
    throw engramError(error);
  }
};

async function* rethrowing<T>(messages: AsyncIterable<T>): AsyncIterable<T> {
  try {
    yield* messages;
  } catch (error) {
    throw engramError(error);
  }
}

export * from "./gen/engram/v1/authz_pb.js";
export * from "./gen/engram/v1/document_pb.js";
export * from "./gen/engram/v1/events_pb.js";
export * from "./gen/engram/v1/indexer_pb.js";
export * from "./gen/engram/v1/maintenance_pb.js";
export * from "./gen/engram/v1/position_pb.js";
export * from "./gen/engram/v1/quota_pb.js";
export * from "./gen/engram/v1/search_pb.js";
export * from "./gen/engram/v1/space_pb.js";
export * from "./gen/engram/v1/storage_pb.js";
export * from "./gen/engram/v1/workspace_pb.js";
