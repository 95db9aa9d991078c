// The null scheduler extender of scripts/kit-nullext.sh (not part of headroom).
// A null scheduler extender: every candidate passes, every candidate scores 0. It decides
// nothing; it measures what kube-scheduler pays for the extender protocol alone.
package main

import (
	"encoding/json"
	"net/http"
)

type args struct {
	NodeNames *[]string `json:"NodeNames"`
}
type filterResult struct {
	NodeNames   *[]string         `json:"NodeNames"`
	FailedNodes map[string]string `json:"FailedNodes"`
	Error       string            `json:"Error"`
}
type hostPriority struct {
	Host  string `json:"Host"`
	Score int64  `json:"Score"`
}

func main() {
	http.HandleFunc("/extender/filter", func(w http.ResponseWriter, r *http.Request) {
		var a args
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(filterResult{NodeNames: a.NodeNames, FailedNodes: map[string]string{}})
	})
	http.HandleFunc("/extender/prioritize", func(w http.ResponseWriter, r *http.Request) {
		var a args
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		out := []hostPriority{}
		if a.NodeNames != nil {
			for _, n := range *a.NodeNames {
				out = append(out, hostPriority{Host: n})
			}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out)
	})
	http.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	http.ListenAndServe("127.0.0.1:10262", nil)
}
