"""MongoDocumentRepository: documents as per-path revision chains on MongoDB.

Each change to (space_id, path) inserts revision `rev + 1` into `revisions` under the _id
`<space_id>\\n<path>\\n<rev>`: exactly one writer can take an _id, so the insert is the
commit - on MongoDB and on FerretDB alike (FerretDB v1's updates are not atomic under
concurrency; inserts of a primary key are). Just before it, the change's event is
recorded in `outbox` under its event id, so the relay finds pending events without
scanning revisions; a pointer whose revision never landed is dropped by the relay.

`documents` holds one small head per path (live document or tombstone, no content) with
the latest revision number, for listing, export and usage. Heads are written after the
revision, guarded by `rev`; readers probe `rev + 1` by _id and roll a lagging head forward.
Reads, writes, deletes and version history use only _id lookups and inserts - FerretDB v1
serves nothing else without scanning a collection; listing, export and usage query
secondary indexes, which real MongoDB uses (FerretDB scans them).

Erasure (PurgeDocument) commits like any change: a content-free PURGE revision at `rev + 1`
with its outbox pointer. From that insert on the path reads as gone (no version is read past
a PURGE revision); then every earlier revision and its unpublished pointers are deleted. A
whole space (DeleteSpace) commits one SPACE_DELETE revision under the reserved empty path
`""`, then tombstones and erases each path the same way (without an event each). If the
process dies after the commit, the relay finishes the erasure before it publishes the event
(`finish_erasure`), and a repeated call finishes it too; until then reads already see
nothing of a purged path (of a deleted space: of the paths already tombstoned).

A write reads its path (`get`) and then saves it: the chain `get` found is reused by the
`save` that follows within CHAIN_REUSE instead of being read again (two `_id` lookups fewer
per write). Reusing it is as safe as reading it again: the commit is still the insert of
`rev + 1`, which fails if any writer got there first; only a writer committing more than
`retention` revisions of the path inside that window (whose pruning could free `rev + 1`)
could get past it, as with a head that lags by as much.

This package splits it by use case over one holder of the collections and the chain
(`chains.MongoChains`): documents (read, write, delete), listing (directories, export,
usage, spaces), versions (history, pruning), erasure, and the outbox (`outbox`, its one
owner: the pointers every change records and the relay that publishes them).
"""
