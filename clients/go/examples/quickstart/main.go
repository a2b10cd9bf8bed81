// The README's Go example: a write, a write on a stale sha256, and a search that reads its
// write. Configured like the engram CLI: ENGRAM_ADDR, ENGRAM_TOKEN, ENGRAM_TLS_CA_FILE, ...
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"

	"engram.dev/clients/go/engram"
	engramv1 "engram.dev/clients/go/gen/engram/v1"
)

func main() {
	ctx := context.Background()
	client, err := engram.Dial(engram.FromEnv())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	space := &engramv1.SpaceRef{
		Visibility: engramv1.Visibility_VISIBILITY_PRIVATE,
		Name:       cmp.Or(os.Getenv("ENGRAM_SPACE"), "notes"),
	}

	written, err := client.Storage.WriteDocument(ctx, &engramv1.WriteDocumentRequest{
		Space: space, Path: "MEMORY.md", Content: "Dana prefers the Thursday standup.\n",
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("wrote", written.GetDocument().GetPath(), "version", written.GetDocument().GetVersion())

	// A write conditional on a sha256 the document does not have is refused.
	_, err = client.Storage.WriteDocument(ctx, &engramv1.WriteDocumentRequest{
		Space: space, Path: "MEMORY.md", Content: "A stale edit.\n",
		ExpectedSha256: strings.Repeat("0", 64),
	})
	var failure *engram.Error
	if errors.As(err, &failure) {
		fmt.Println("refused:", engram.CodeName(failure.Code), failure.Reason)
	}

	// Read your writes: the search answers once the index holds the write.
	found, err := client.Search.Search(ctx, &engramv1.SearchRequest{
		Spaces: []*engramv1.SpaceRef{space}, Query: "standup",
		Mode:         engramv1.SearchMode_SEARCH_MODE_LEXICAL,
		MinPositions: []*engramv1.IndexPosition{written.GetPosition()},
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, hit := range found.GetResults() {
		fmt.Println("found", hit.GetPath())
	}
}
