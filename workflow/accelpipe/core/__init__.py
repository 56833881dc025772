"""What every layer may use: errors, files, locks and leases, the workload registry, provenance,
redaction, the Docker Engine client, FLOP counts, the Keras 2 shim, the MLPerf log and the
package's import graph."""
