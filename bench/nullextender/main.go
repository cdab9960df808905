// Command nullextender is a kube-scheduler HTTP extender that decides nothing: filter passes
// every candidate, prioritize prefers none, bind posts the binding. The cluster benchmark puts it
// behind a kube-scheduler profile to measure what the extender protocol itself costs a plain pod
// (configuration Vz of bench/cluster_bench.py), apart from any work an extender does.
package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"time"
)

// filterArgs is the part of ExtenderArgs a node-cache-capable extender needs: the candidates.
type filterArgs struct {
	NodeNames *[]string `json:"nodenames"`
}

type filterResult struct {
	NodeNames                  *[]string         `json:"nodenames"`
	FailedNodes                map[string]string `json:"failedNodes"`
	FailedAndUnresolvableNodes map[string]string `json:"failedAndUnresolvableNodes"`
	Error                      string            `json:"error"`
}

type bindArgs struct {
	PodName      string `json:"podName"`
	PodNamespace string `json:"podNamespace"`
	PodUID       string `json:"podUID"`
	Node         string `json:"node"`
}

type bindResult struct {
	Error string `json:"error"`
}

type binder struct {
	client    *http.Client
	apiserver string
}

func writeJSON(w http.ResponseWriter, value any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(value); err != nil {
		log.Printf("write: %v", err)
	}
}

func filter(w http.ResponseWriter, r *http.Request) {
	var args filterArgs
	if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	writeJSON(w, filterResult{NodeNames: args.NodeNames, FailedNodes: map[string]string{},
		FailedAndUnresolvableNodes: map[string]string{}})
}

func prioritize(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	writeJSON(w, []struct{}{})
}

func (b *binder) bind(w http.ResponseWriter, r *http.Request) {
	var args bindArgs
	if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	body, _ := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Binding",
		"metadata": map[string]any{"name": args.PodName, "namespace": args.PodNamespace, "uid": args.PodUID},
		"target":   map[string]any{"apiVersion": "v1", "kind": "Node", "name": args.Node},
	})
	url := fmt.Sprintf("%s/api/v1/namespaces/%s/pods/%s/binding", b.apiserver, args.PodNamespace, args.PodName)
	resp, err := b.client.Post(url, "application/json", bytes.NewReader(body))
	result := bindResult{}
	if err != nil {
		result.Error = err.Error()
	} else {
		text, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			result.Error = fmt.Sprintf("binding: %d %s", resp.StatusCode, text)
		}
	}
	writeJSON(w, result)
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8899", "address to serve the extender verbs on")
	apiserver := flag.String("apiserver", "https://127.0.0.1:6443", "kube-apiserver URL")
	cert := flag.String("cert", "", "client certificate allowed to create pods/binding")
	key := flag.String("key", "", "its key")
	flag.Parse()
	pair, err := tls.LoadX509KeyPair(*cert, *key)
	if err != nil {
		log.Fatalf("client certificate: %v", err)
	}
	transport := &http.Transport{
		// The local cluster's serving certificate is self-signed; this is a benchmark tool.
		TLSClientConfig:     &tls.Config{Certificates: []tls.Certificate{pair}, InsecureSkipVerify: true}, //nolint:gosec
		MaxIdleConnsPerHost: 64,
	}
	b := &binder{client: &http.Client{Transport: transport, Timeout: 30 * time.Second}, apiserver: *apiserver}
	mux := http.NewServeMux()
	mux.HandleFunc("/filter", filter)
	mux.HandleFunc("/prioritize", prioritize)
	mux.HandleFunc("/bind", b.bind)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	log.Fatal(http.ListenAndServe(*listen, mux))
}
