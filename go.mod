module github.com/fencelock/fencelock

go 1.26
