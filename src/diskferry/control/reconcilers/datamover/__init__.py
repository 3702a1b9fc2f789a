"""The data movers: the life DataUpload and DataDownload share (`moverlife`), each kind's
reconciler, the configuration they read (`moverconfig`), and the admission of Prepared movers
to InProgress (`admission`)."""
