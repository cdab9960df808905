//go:build tools

// Package tools pins the upstream programs that hack/build-binaries.sh
// compiles for the local test cluster. It is never built as a library;
// the blank imports only keep the dependencies in go.mod.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
