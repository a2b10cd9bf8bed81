/**
 * The client conformance steps against a server, printed as a JSON summary: an etag write, a
 * conflicting write, a read, a listing, a search carrying the write's index position, the
 * change feed from a cursor and an export. The Go program (clients/go/cmd/engram-conformance)
 * and the Python test (tests/e2e/test_polyglot_clients.py) do the same steps; the test
 * compares the three summaries.
 *
 *   node dist/conformance/main.js --addr 127.0.0.1:50051 --token "$ENGRAM_TOKEN" --ca ca.pem
 */
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { parseArgs } from "node:util";

import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Parser } from "tar";

import {
  ChangeKind,
  EngramError,
  MemoryTarget,
  SearchMode,
  SpaceRefSchema,
  Visibility,
  WriteMode,
  connect,
  type Engram,
  type SpaceChange,
  type SpaceRef,
  WatchSpaceRequestSchema,
  type WriteDocumentResponse,
} from "../src/index.js";

// The documents every conformance program writes, in this order.
const MEMORY_PATH = "MEMORY.md";
const MEMORY_TEXT = "# Memory\nThe team meets on Thursdays.\n";
const PLAN_PATH = "notes/plan.md";
const PLAN_DRAFT = "# Plan\nA first draft.\n";
const PLAN_FINAL = "# Plan\nLaunch the zeppelin on Friday.\n";
const PLAN_STALE = "# Plan\nAn edit made on a stale copy.\n";
const SEARCH_QUERY = "zeppelin";
// Agent writes (MemoryWrite) are rate limited per principal; the test's server allows two a
// minute, so this many writes always meet the limit.
const AGENT_WRITES = 5;

const { values: args } = parseArgs({
  options: {
    addr: { type: "string", default: "127.0.0.1:50051" },
    space: { type: "string", default: "conformance-ts" },
    token: { type: "string", default: process.env.ENGRAM_TOKEN ?? "" },
    ca: { type: "string" },
    cert: { type: "string" },
    key: { type: "string" },
  },
});

async function run(engram: Engram, space: SpaceRef): Promise<object> {
  const signal = AbortSignal.timeout(60_000);
  const write = (path: string, content: string, expectedSha256 = "") =>
    engram.storage.writeDocument(
      { space, path, content, mode: WriteMode.REPLACE, expectedSha256 },
      { signal },
    );
  const writes: object[] = [];
  const record = (w: WriteDocumentResponse) => {
    const d = w.document!;
    writes.push({ path: d.path, sha256: d.sha256, version: Number(d.version), created: w.created });
  };
  record(await write(MEMORY_PATH, MEMORY_TEXT));
  const draft = await write(PLAN_PATH, PLAN_DRAFT);
  record(draft);
  // The etag write: replaces the draft only if it is still the draft.
  const final = await write(PLAN_PATH, PLAN_FINAL, draft.document!.sha256);
  record(final);
  // The same condition again is stale now: ABORTED, reason ETAG_MISMATCH.
  let conflict: object;
  try {
    await write(PLAN_PATH, PLAN_STALE, draft.document!.sha256);
    throw new Error("the conflicting write succeeded");
  } catch (error) {
    if (!(error instanceof EngramError)) {
      throw error;
    }
    conflict = {
      code: error.codeName,
      reason: error.reason,
      current_sha256: error.errorMetadata["current_sha256"] ?? "",
    };
  }

  // A path that is not canonical: INVALID_ARGUMENT, with BadRequest's field.
  let invalid: object;
  try {
    await write(`./${PLAN_PATH}`, PLAN_STALE);
    throw new Error("the invalid write succeeded");
  } catch (error) {
    if (!(error instanceof EngramError)) {
      throw error;
    }
    invalid = { code: error.codeName, reason: error.reason, field: error.field };
  }

  const { document } = await engram.storage.readDocument({ space, path: PLAN_PATH }, { signal });
  const read = {
    path: document!.path,
    content: document!.content,
    sha256: document!.sha256,
    version: Number(document!.version),
  };

  const list: string[] = [];
  let pageToken = "";
  do {
    const page = await engram.storage.listDocuments({ space, recursive: true, pageToken }, { signal });
    list.push(...page.entries.filter((e) => !e.isDir).map((e) => e.path));
    pageToken = page.nextPageToken;
  } while (pageToken);

  // Read your writes: the search answers once the keyword index holds the etag write.
  const found = await engram.search.search(
    {
      spaces: [space],
      query: SEARCH_QUERY,
      limit: 5,
      mode: SearchMode.LEXICAL,
      minPositions: [final.position!],
      maxWaitMs: 10_000,
    },
    { signal },
  );
  const search = {
    paths: found.results.map((r) => r.path),
    keyword_positions_behind: found.keywordPositionsBehind,
    degraded: found.degraded,
  };

  // The change feed: replay from the start to learn the first change's cursor, then resume
  // after it.
  const all = await watch(engram, { space, fromStart: true }, signal);
  if (all.length === 0) {
    throw new Error("watch: the change feed replayed nothing");
  }
  const rest = await watch(engram, { space, cursor: all[0].cursor }, signal);
  const feed = rest.map((c) => ({
    path: c.path,
    kind: ChangeKind[c.kind].toLowerCase(),
    version: Number(c.version),
    sha256: c.sha256,
  }));

  const exported = await exportNames(engram, space, signal);

  // Agent writes until the rate limit answers, with RetryInfo's delay.
  let limited = {};
  for (let n = 0; n < AGENT_WRITES; n++) {
    try {
      await engram.workspace.memoryWrite({ space, target: MemoryTarget.MEMORY, content: "A note." }, { signal });
    } catch (error) {
      if (!(error instanceof EngramError)) {
        throw error;
      }
      limited = {
        code: error.codeName,
        reason: error.reason,
        has_retry_delay: (error.retryDelayMs ?? 0) > 0,
      };
      break;
    }
  }
  return { writes, conflict, invalid, read, list, search, feed, export: exported, rate_limited: limited };
}

/** Reads the feed until it has caught up with what was stored when the watch began. */
async function watch(
  engram: Engram,
  request: MessageInitShape<typeof WatchSpaceRequestSchema>,
  parent: AbortSignal,
): Promise<SpaceChange[]> {
  const stop = new AbortController(); // ends the stream, which would otherwise follow live changes
  const changes: SpaceChange[] = [];
  try {
    for await (const message of engram.storage.watchSpace(request, {
      signal: AbortSignal.any([parent, stop.signal]),
    })) {
      if (message.change) {
        changes.push(message.change);
      }
      if (message.caughtUp) {
        return changes;
      }
    }
  } finally {
    stop.abort();
  }
  throw new Error("watch: the feed ended before it caught up");
}

/** Downloads the space's archive (a gzipped tar) and lists the files in it. */
async function exportNames(engram: Engram, space: SpaceRef, signal: AbortSignal): Promise<string[]> {
  const chunks = engram.storage.exportSpace({ space }, { signal });
  const names: string[] = [];
  const parser = new Parser({
    onReadEntry: (entry) => {
      if (entry.type === "File") {
        names.push(entry.path);
      }
      entry.resume();
    },
  });
  await pipeline(
    Readable.from((async function* () {
      for await (const chunk of chunks) {
        yield chunk.data;
      }
    })()),
    parser,
  );
  return names.sort();
}

const engram = connect(args.addr!, {
  token: args.token,
  caFile: args.ca,
  certFile: args.cert,
  keyFile: args.key,
});
try {
  const space = create(SpaceRefSchema, { visibility: Visibility.PRIVATE, name: args.space });
  const summary = await run(engram, space);
  process.stdout.write(JSON.stringify(summary, null, 2) + "\n");
} catch (error) {
  process.stderr.write(`engram-conformance: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exitCode = 1;
} finally {
  engram.close();
}
