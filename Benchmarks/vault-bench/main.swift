import Foundation

// vault-bench: see Bench.swift and `vault-bench --help`.
exit(Bench.main(Array(CommandLine.arguments.dropFirst())))
