package main

// The backends the CLI can open by URL.
import (
	_ "github.com/fencelock/fencelock/backends/dynamodb"
	_ "github.com/fencelock/fencelock/backends/etcd"
	_ "github.com/fencelock/fencelock/backends/memory"
	_ "github.com/fencelock/fencelock/backends/pgadvisory"
	_ "github.com/fencelock/fencelock/backends/redis"
	_ "github.com/fencelock/fencelock/backends/redlock"
	_ "github.com/fencelock/fencelock/backends/zookeeper"
)
