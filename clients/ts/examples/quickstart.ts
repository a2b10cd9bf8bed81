// The README's TypeScript example: a write, a write on a stale sha256, and a search that reads
// its write. Configured like the engram CLI: ENGRAM_ADDR, ENGRAM_TOKEN, ENGRAM_TLS_CA_FILE, ...
import { create } from "@bufbuild/protobuf";
import { EngramError, SearchMode, SpaceRefSchema, Visibility, connect, fromEnv } from "@engram/client";

const engram = connect(...fromEnv());
const space = create(SpaceRefSchema, {
  visibility: Visibility.PRIVATE,
  name: process.env.ENGRAM_SPACE || "notes",
});
try {
  const written = await engram.storage.writeDocument({
    space,
    path: "MEMORY.md",
    content: "Dana prefers the Thursday standup.\n",
  });
  console.log("wrote", written.document?.path, "version", Number(written.document?.version));

  // A write conditional on a sha256 the document does not have is refused.
  try {
    await engram.storage.writeDocument({
      space,
      path: "MEMORY.md",
      content: "A stale edit.\n",
      expectedSha256: "0".repeat(64),
    });
  } catch (error) {
    if (!(error instanceof EngramError)) throw error;
    console.log("refused:", error.codeName, error.reason);
  }

  // Read your writes: the search answers once the index holds the write.
  const found = await engram.search.search({
    spaces: [space],
    query: "standup",
    mode: SearchMode.LEXICAL,
    minPositions: [written.position!],
  });
  for (const hit of found.results) {
    console.log("found", hit.path);
  }
} finally {
  engram.close();
}
