"""The API server, shaped as Kubernetes': the object store (`store`), the ObjectService that
creates, reads, changes, deletes and watches objects (`objects`), their validation, the CRDs of
the kinds it serves, its HTTPS API (`http`), and its CA, token and kubeconfig (`pki`,
`kubeconfig`)."""
