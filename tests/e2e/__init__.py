"""End-to-end tests against a real cluster whose kube-scheduler calls Quorum (marker ``e2e``)."""
