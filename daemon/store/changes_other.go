//go:build !linux

package store

import "errors"

func watchDir(string) (watcher, error) { return nil, errors.New("not watched on this system") }
