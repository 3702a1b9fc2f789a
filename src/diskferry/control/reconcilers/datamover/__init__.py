"""The data movers: the life DataUpload and DataDownload share (`moverlife`), each kind's
reconciler, and the admission of Prepared movers to InProgress (`admission`)."""
