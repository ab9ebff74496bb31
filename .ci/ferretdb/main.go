// Command ferretdb-ci runs FerretDB v1 (SQLite handler) as a MongoDB-wire stand-in for CI.
//
// It wraps FerretDB's embeddable package instead of building cmd/ferretdb with
// `go install …/cmd/ferretdb@v1.24.2`, which fails here twice: the Go module proxy refuses
// the version-list lookup `go install pkg@version` makes for its deprecation check (403), and
// a binary whose main module is FerretDB itself panics at start-up because the module zip
// lacks the generated build/version/version.txt.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/FerretDB/FerretDB/ferretdb"
)

func main() {
	listen := flag.String("listen-addr", "127.0.0.1:27017", "TCP address to listen on")
	dir := flag.String("sqlite-dir", "", "directory for the SQLite databases")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "-sqlite-dir is required")
		os.Exit(2)
	}

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	server, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: *listen},
		Logger:    logger,
		Handler:   "sqlite",
		SQLiteURL: "file:" + *dir + "/",
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fmt.Println("ferretdb listening:", server.MongoDBURI())
	if err := server.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
