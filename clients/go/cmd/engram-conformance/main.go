// Command engram-conformance runs the client conformance steps against a server and prints a
// JSON summary: an etag write, a conflicting write, a read, a listing, a search carrying the
// write's index position, the change feed from a cursor and an export. The Node program
// (clients/ts/conformance) and the Python test (tests/e2e/test_polyglot_clients.py) do the
// same steps; the test compares the three summaries.
//
//	engram-conformance -addr 127.0.0.1:50051 -token "$ENGRAM_TOKEN" -ca ca.pem -space go
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"engram.dev/clients/go/engram"
	engramv1 "engram.dev/clients/go/gen/engram/v1"
)

// The documents every conformance program writes, in this order.
const (
	memoryPath  = "MEMORY.md"
	memoryText  = "# Memory\nThe team meets on Thursdays.\n"
	planPath    = "notes/plan.md"
	planDraft   = "# Plan\nA first draft.\n"
	planFinal   = "# Plan\nLaunch the zeppelin on Friday.\n"
	planStale   = "# Plan\nAn edit made on a stale copy.\n"
	searchQuery = "zeppelin"
	// Agent writes (MemoryWrite) are rate limited per principal; the test's server allows two
	// a minute, so this many writes always meet the limit.
	agentWrites = 5
)

type written struct {
	Path    string `json:"path"`
	Sha256  string `json:"sha256"`
	Version int64  `json:"version"`
	Created bool   `json:"created"`
}

type conflict struct {
	Code          string `json:"code"`
	Reason        string `json:"reason"`
	CurrentSha256 string `json:"current_sha256"`
}

type read struct {
	Path    string `json:"path"`
	Content string `json:"content"`
	Sha256  string `json:"sha256"`
	Version int64  `json:"version"`
}

type search struct {
	Paths         []string `json:"paths"`
	KeywordBehind int32    `json:"keyword_positions_behind"`
	Degraded      bool     `json:"degraded"`
}

type change struct {
	Path    string `json:"path"`
	Kind    string `json:"kind"`
	Version int64  `json:"version"`
	Sha256  string `json:"sha256"`
}

type refused struct {
	Code   string `json:"code"`
	Reason string `json:"reason"`
	Field  string `json:"field"`
}

type rateLimited struct {
	Code          string `json:"code"`
	Reason        string `json:"reason"`
	HasRetryDelay bool   `json:"has_retry_delay"`
}

type summary struct {
	Writes   []written   `json:"writes"`
	Conflict conflict    `json:"conflict"`
	Invalid  refused     `json:"invalid"`
	Read     read        `json:"read"`
	List     []string    `json:"list"`
	Search   search      `json:"search"`
	Feed     []change    `json:"feed"`
	Export   []string    `json:"export"`
	Limited  rateLimited `json:"rate_limited"`
}

func main() {
	var opts engram.Options
	addr := flag.String("addr", "127.0.0.1:50051", "server address")
	space := flag.String("space", "conformance-go", "private space to use (empty before the run)")
	flag.StringVar(&opts.Token, "token", os.Getenv("ENGRAM_TOKEN"), "bearer token (ENGRAM_TOKEN)")
	flag.StringVar(&opts.CAFile, "ca", "", "CA bundle (PEM) that verifies the server; turns TLS on")
	flag.StringVar(&opts.CertFile, "cert", "", "client certificate (PEM) for mTLS")
	flag.StringVar(&opts.KeyFile, "key", "", "client key (PEM) for mTLS")
	flag.Parse()
	if err := run(*addr, opts, *space); err != nil {
		fmt.Fprintln(os.Stderr, "engram-conformance:", err)
		os.Exit(1)
	}
}

func run(addr string, opts engram.Options, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client, err := engram.Dial(addr, opts)
	if err != nil {
		return err
	}
	defer client.Close()
	space := &engramv1.SpaceRef{Visibility: engramv1.Visibility_VISIBILITY_PRIVATE, Name: name}
	var out summary

	write := func(path, content, expected string) (*engramv1.WriteDocumentResponse, error) {
		return client.Storage.WriteDocument(ctx, &engramv1.WriteDocumentRequest{
			Space: space, Path: path, Content: content,
			Mode: engramv1.WriteMode_WRITE_MODE_REPLACE, ExpectedSha256: expected,
		})
	}
	record := func(w *engramv1.WriteDocumentResponse) {
		d := w.GetDocument()
		out.Writes = append(out.Writes, written{d.GetPath(), d.GetSha256(), d.GetVersion(), w.GetCreated()})
	}
	first, err := write(memoryPath, memoryText, "")
	if err != nil {
		return fmt.Errorf("write %s: %w", memoryPath, err)
	}
	record(first)
	draft, err := write(planPath, planDraft, "")
	if err != nil {
		return fmt.Errorf("write %s: %w", planPath, err)
	}
	record(draft)
	// The etag write: replaces the draft only if it is still the draft.
	final, err := write(planPath, planFinal, draft.GetDocument().GetSha256())
	if err != nil {
		return fmt.Errorf("etag write: %w", err)
	}
	record(final)
	// The same condition again is stale now: ABORTED, reason ETAG_MISMATCH.
	_, err = write(planPath, planStale, draft.GetDocument().GetSha256())
	var failure *engram.Error
	if !errors.As(err, &failure) {
		return fmt.Errorf("conflicting write: want an *engram.Error, got %v", err)
	}
	out.Conflict = conflict{engram.CodeName(failure.Code), failure.Reason, failure.Metadata["current_sha256"]}
	// A path that is not canonical: INVALID_ARGUMENT, with BadRequest's field.
	_, err = write("./"+planPath, planStale, "")
	if !errors.As(err, &failure) {
		return fmt.Errorf("invalid write: want an *engram.Error, got %v", err)
	}
	out.Invalid = refused{engram.CodeName(failure.Code), failure.Reason, failure.Field}

	got, err := client.Storage.ReadDocument(ctx, &engramv1.ReadDocumentRequest{Space: space, Path: planPath})
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	d := got.GetDocument()
	out.Read = read{d.GetPath(), d.GetContent(), d.GetSha256(), d.GetVersion()}

	out.List = []string{}
	pageToken := ""
	for {
		page, err := client.Storage.ListDocuments(ctx, &engramv1.ListDocumentsRequest{
			Space: space, Recursive: true, PageToken: pageToken,
		})
		if err != nil {
			return fmt.Errorf("list: %w", err)
		}
		for _, entry := range page.GetEntries() {
			if !entry.GetIsDir() {
				out.List = append(out.List, entry.GetPath())
			}
		}
		if pageToken = page.GetNextPageToken(); pageToken == "" {
			break
		}
	}

	// Read your writes: the search answers once the keyword index holds the etag write.
	found, err := client.Search.Search(ctx, &engramv1.SearchRequest{
		Spaces: []*engramv1.SpaceRef{space}, Query: searchQuery, Limit: 5,
		Mode:         engramv1.SearchMode_SEARCH_MODE_LEXICAL,
		MinPositions: []*engramv1.IndexPosition{final.GetPosition()}, MaxWaitMs: 10000,
	})
	if err != nil {
		return fmt.Errorf("search: %w", err)
	}
	out.Search = search{Paths: []string{}, KeywordBehind: found.GetKeywordPositionsBehind(), Degraded: found.GetDegraded()}
	for _, hit := range found.GetResults() {
		out.Search.Paths = append(out.Search.Paths, hit.GetPath())
	}

	// The change feed: replay from the start to learn the first change's cursor, then resume
	// after it.
	all, err := watch(ctx, client, &engramv1.WatchSpaceRequest{Space: space, FromStart: true})
	if err != nil {
		return err
	}
	if len(all) == 0 {
		return errors.New("watch: the change feed replayed nothing")
	}
	rest, err := watch(ctx, client, &engramv1.WatchSpaceRequest{Space: space, Cursor: all[0].GetCursor()})
	if err != nil {
		return err
	}
	out.Feed = []change{}
	for _, c := range rest {
		kind := strings.ToLower(strings.TrimPrefix(c.GetKind().String(), "CHANGE_KIND_"))
		out.Feed = append(out.Feed, change{c.GetPath(), kind, c.GetVersion(), c.GetSha256()})
	}

	if out.Export, err = export(ctx, client, space); err != nil {
		return err
	}

	// Agent writes until the rate limit answers, with RetryInfo's delay.
	for range agentWrites {
		_, err = client.Workspace.MemoryWrite(ctx, &engramv1.MemoryWriteRequest{
			Space: space, Target: engramv1.MemoryTarget_MEMORY_TARGET_MEMORY, Content: "A note.",
		})
		if errors.As(err, &failure) {
			out.Limited = rateLimited{engram.CodeName(failure.Code), failure.Reason, failure.RetryDelay > 0}
			break
		}
		if err != nil {
			return fmt.Errorf("memory write: %w", err)
		}
	}
	encoder := json.NewEncoder(os.Stdout)
	encoder.SetIndent("", "  ")
	return encoder.Encode(out)
}

// watch reads the feed until it has caught up with what was stored when the watch began.
func watch(ctx context.Context, client *engram.Client, req *engramv1.WatchSpaceRequest) ([]*engramv1.SpaceChange, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream, which would otherwise follow live changes
	stream, err := client.Storage.WatchSpace(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	var changes []*engramv1.SpaceChange
	for {
		msg, err := stream.Recv()
		if err != nil {
			return nil, fmt.Errorf("watch: %w", err)
		}
		if msg.GetChange() != nil {
			changes = append(changes, msg.GetChange())
		}
		if msg.GetCaughtUp() {
			return changes, nil
		}
	}
}

// export downloads the space's archive (a gzipped tar) and lists the files in it.
func export(ctx context.Context, client *engram.Client, space *engramv1.SpaceRef) ([]string, error) {
	stream, err := client.Storage.ExportSpace(ctx, &engramv1.ExportSpaceRequest{Space: space})
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	var archive bytes.Buffer
	for {
		chunk, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("export: %w", err)
		}
		archive.Write(chunk.GetData())
	}
	unzipped, err := gzip.NewReader(&archive)
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	names := []string{}
	files := tar.NewReader(unzipped)
	for {
		header, err := files.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("export: %w", err)
		}
		if header.Typeflag == tar.TypeReg {
			names = append(names, header.Name)
		}
	}
	sort.Strings(names)
	return names, nil
}
