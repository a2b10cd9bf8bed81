// Package engram is the Go client of engram's gRPC API: one connection to an engram server
// (or a Kubernetes Service of replicas) with a bearer token and TLS or mTLS, a stub per service
// from the generated code in engram.dev/clients/go/gen/engram/v1, and every failed call
// returned as an *Error carrying the status's ErrorInfo reason and RetryInfo delay.
//
//	client, err := engram.Dial("127.0.0.1:50051", engram.Options{Token: token, CAFile: "ca.pem"})
//	if err != nil { ... }
//	defer client.Close()
//	doc, err := client.Storage.ReadDocument(ctx, &engramv1.ReadDocumentRequest{...})
//	var failure *engram.Error
//	if errors.As(err, &failure) && failure.Reason == "DOCUMENT_NOT_FOUND" { ... }
package engram

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	engramv1 "engram.dev/clients/go/gen/engram/v1"
)

// Options says how to reach the server. The zero value is a plaintext connection without a
// token, as `engram dev` serves by default.
type Options struct {
	// Token is a personal access token or a JWT, sent as `authorization: Bearer <token>`.
	Token string
	// TLS turns TLS on with the system's roots; CAFile, CertFile or ServerName imply it.
	TLS bool
	// CAFile is a PEM bundle of the roots that verify the server (instead of the system's).
	CAFile string
	// CertFile and KeyFile are the client's certificate and key (PEM) for an mTLS server.
	CertFile string
	KeyFile  string
	// ServerName is the name to verify the server's certificate against (default: the
	// target's host), for replicas reached by address whose certificates name a Service.
	ServerName string
}

func (o Options) usesTLS() bool {
	return o.TLS || o.CAFile != "" || o.CertFile != "" || o.ServerName != ""
}

// Client holds one connection and a stub for each engram service on it.
type Client struct {
	Conn        *grpc.ClientConn
	Storage     engramv1.StorageServiceClient
	Search      engramv1.SearchServiceClient
	Workspace   engramv1.WorkspaceServiceClient
	Authz       engramv1.AuthzServiceClient
	Quota       engramv1.QuotaServiceClient
	Maintenance engramv1.MaintenanceServiceClient
	Indexer     engramv1.IndexerServiceClient
}

// Dial opens a client to target (`host:port`, or any gRPC target such as
// `dns:///engram.engram.svc:50051`). The connection is made lazily, on the first call; extra
// options are passed to grpc.NewClient after the client's own.
func Dial(target string, opts Options, extra ...grpc.DialOption) (*Client, error) {
	transport := insecure.NewCredentials()
	if opts.usesTLS() {
		config, err := tlsConfig(opts)
		if err != nil {
			return nil, err
		}
		transport = credentials.NewTLS(config)
	}
	dial := []grpc.DialOption{
		grpc.WithTransportCredentials(transport),
		grpc.WithChainUnaryInterceptor(unaryErrors),
		grpc.WithChainStreamInterceptor(streamErrors),
	}
	if opts.Token != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(bearer{token: opts.Token, secure: opts.usesTLS()}))
	}
	conn, err := grpc.NewClient(target, append(dial, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("engram: %w", err)
	}
	return &Client{
		Conn:        conn,
		Storage:     engramv1.NewStorageServiceClient(conn),
		Search:      engramv1.NewSearchServiceClient(conn),
		Workspace:   engramv1.NewWorkspaceServiceClient(conn),
		Authz:       engramv1.NewAuthzServiceClient(conn),
		Quota:       engramv1.NewQuotaServiceClient(conn),
		Maintenance: engramv1.NewMaintenanceServiceClient(conn),
		Indexer:     engramv1.NewIndexerServiceClient(conn),
	}, nil
}

// Close closes the connection; calls in flight fail.
func (c *Client) Close() error {
	return c.Conn.Close()
}

func tlsConfig(opts Options) (*tls.Config, error) {
	config := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: opts.ServerName}
	if opts.CAFile != "" {
		pem, err := os.ReadFile(opts.CAFile)
		if err != nil {
			return nil, fmt.Errorf("engram: CA file: %w", err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("engram: CA file %s holds no PEM certificate", opts.CAFile)
		}
		config.RootCAs = roots
	}
	if (opts.CertFile == "") != (opts.KeyFile == "") {
		return nil, errors.New("engram: a client certificate needs both CertFile and KeyFile")
	}
	if opts.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(opts.CertFile, opts.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("engram: client certificate: %w", err)
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return config, nil
}

// bearer sends the token on every call. Over plaintext too (`engram dev --auth` on loopback),
// as the Python client and the CLI do.
type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool {
	return b.secure
}

// DefaultAddr is the address `engram dev` serves on.
const DefaultAddr = "127.0.0.1:50051"

// FromEnv is the address and options the engram CLI would use from its environment:
// ENGRAM_ADDR, ENGRAM_TOKEN, ENGRAM_TLS, ENGRAM_TLS_CA_FILE, ENGRAM_TLS_CLIENT_CERT_FILE,
// ENGRAM_TLS_CLIENT_KEY_FILE and ENGRAM_TLS_SERVER_NAME.
func FromEnv() (string, Options) {
	addr := os.Getenv("ENGRAM_ADDR")
	if addr == "" {
		addr = DefaultAddr
	}
	tlsOn, _ := strconv.ParseBool(os.Getenv("ENGRAM_TLS"))
	return addr, Options{
		Token:      os.Getenv("ENGRAM_TOKEN"),
		TLS:        tlsOn,
		CAFile:     os.Getenv("ENGRAM_TLS_CA_FILE"),
		CertFile:   os.Getenv("ENGRAM_TLS_CLIENT_CERT_FILE"),
		KeyFile:    os.Getenv("ENGRAM_TLS_CLIENT_KEY_FILE"),
		ServerName: os.Getenv("ENGRAM_TLS_SERVER_NAME"),
	}
}
