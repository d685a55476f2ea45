"""Kubernetes placement by cached bytes: what a pod asks for (`pod_requests`), how nodes
score (`locality_scores`, pure), and the two ways to tell Kubernetes — a scheduler
extender (`extender`) and a mutating admission webhook (`admission`)."""
