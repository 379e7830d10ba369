// Command kube-apiserver is the upstream Kubernetes API server, built from the pinned
// k8s.io/kubernetes module so that ferry's tests and demo run against the real thing.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
