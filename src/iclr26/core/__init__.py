"""What every paper shares: config, io, acquisition, training support, statistics, claims, tables."""
