package controller

import (
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// watchMapped returns how a typed controller watches a kind from the manager's cache: every
// event of obj's kind enqueues the keys fn maps the object to.
func watchMapped[K comparable](mgr ctrl.Manager, c controller.TypedController[K]) func(client.Object, handler.TypedMapFunc[client.Object, K]) error {
	return func(obj client.Object, fn handler.TypedMapFunc[client.Object, K]) error {
		return c.Watch(source.TypedKind(mgr.GetCache(), obj, handler.TypedEnqueueRequestsFromMapFunc(fn)))
	}
}
