// CoreDNS for the testbed's cluster DNS, with only the plugins a cluster's
// kube-dns needs: the full upstream build links every cloud provider's SDK,
// which would multiply the cold build time for nothing.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	// Execution order, as in upstream's plugin.cfg.
	if err := dnsserver.SetDirectives([]string{
		"bind", "ready", "health", "errors", "log", "cache", "kubernetes", "loop",
	}); err != nil {
		panic(err)
	}
	coremain.Run()
}
