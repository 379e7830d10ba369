// Command kube-controller-manager is the upstream Kubernetes controller manager, built from
// the pinned k8s.io/kubernetes module. The local super cluster runs its namespace and garbage
// collector controllers, so that a deleted namespace goes away as it does in a real cluster.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
