// swift-tools-version: 6.0
import PackageDescription

// Targets are listed top to bottom as in docs/ARCHITECTURE.md: imports point down the list.
// Heavy dependencies have few importers: GRDB -> ServerStorage, LocalState and MetadataIndex
// (the SQL functions of compiled queries), PostgresNIO -> PostgresStorage, Hummingbird -> SyncServer and MountDaemon (the
// control socket), AsyncHTTPClient -> SyncClient, S3Client, S3BlobStore and TestSupport,
// ArgumentParser -> the executables, Prometheus -> SyncServer, ubiq-server and MountDaemon.
let package = Package(
    name: "ubiq",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "ubiq-server", targets: ["ubiq-server"]),
        .executable(name: "ubiq", targets: ["ubiq"]),
        .executable(name: "ubiq-full", targets: ["ubiq-full"]),
        // The iCloud API for Swift programs, over a running mount's control socket.
        .library(name: "UbiqKit", targets: ["UbiqKit"]),
    ],
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", exact: "2.28.1"),
        .package(url: "https://github.com/groue/GRDB.swift.git", exact: "7.10.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", exact: "1.37.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", exact: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", exact: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", exact: "2.13.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", exact: "3.12.3"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", exact: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", exact: "2.4.1"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", exact: "2.37.6"),
        .package(url: "https://github.com/vapor/postgres-nio.git", exact: "1.33.2"),
    ],
    targets: [
        // The sample program on UbiqKit: a terminal text editor for the Documents folder
        // (docs/UBIQKIT.md, "The sample program"); a test drives it on two devices.
        .executableTarget(name: "simple-text-editor", dependencies: ["UbiqKit"], path: "Examples/SimpleTextEditor"),
        // NSMetadataQuery, NSUbiquitousKeyValueStore, NSFileVersion and the ubiquitous URL
        // resource values for programs: talks to a running mount's daemon (docs/UBIQKIT.md).
        .target(name: "UbiqKit", dependencies: ["SyncAPI", "ControlSocket", "MountInfo", "ItemModel", "ItemAttributes", "QueryLanguage"]),
        // The command users type: answers a query itself, without Foundation, and hands every
        // other command to ubiq-full (docs/ARCHITECTURE.md). Linked at a fixed address: a
        // position-independent executable has its relocations applied at every start, a fifth
        // of this one's start (0.4 ms). It reads only local files and its user's own socket;
        // the executables that take data from the network stay position-independent.
        .executableTarget(name: "ubiq", dependencies: ["ControlSocket"], linkerSettings: [.unsafeFlags(["-Xlinker", "-no-pie"])]),
        .executableTarget(
            name: "ubiq-full",
            dependencies: [
                "QueryLanguage", "MetadataIndex", "MountDaemon", "FuseKit", "SyncClient", "SyncAPI", "ItemModel", "LocalState", "DataFolderLock",
                "ControlSocket", "MountInfo", "ItemAttributes",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "ubiq-server",
            dependencies: [
                "SyncServer", "SyncService", "ServerStorage", "PostgresStorage", "S3BlobStore", "S3Client", "ItemModel", "DataFolderLock",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ]
        ),
        .target(
            name: "MountDaemon",
            dependencies: [
                "MetadataIndex", "QueryLanguage", "VFS", "SyncEngine", "OpenFiles", "CacheFiles", "SyncClient", "LocalState", "FuseKit", "SyncAPI", "ItemModel", "PageCache",
                "ControlSocket",
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .target(
            name: "SyncServer",
            dependencies: [
                "SyncService", "ServerStorage", "SyncAPI", "ItemModel",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // Blobs in an S3 bucket: the BlobStore conformance over S3Client.
        .target(
            name: "S3BlobStore",
            dependencies: [
                "ServerStorage", "S3Client", "ItemModel",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .target(name: "SyncService", dependencies: ["ServerStorage", "SyncAPI", "ItemModel", .product(name: "NIOCore", package: "swift-nio")]),
        // The metadata stores of ServerStorage over PostgreSQL: another backend behind the same seams.
        .target(
            name: "PostgresStorage",
            dependencies: [
                "ServerStorage", "ItemModel",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            // Unoptimized even in release: Swift 6.3.1's optimizer crashes (signal 11, splitting
            // async functions' coroutines) on several of this target's store methods. Its time
            // goes to waiting on PostgreSQL; postgres-nio itself stays optimized.
            swiftSettings: [.unsafeFlags(["-Onone"])]
        ),
        .target(
            name: "ServerStorage",
            dependencies: [
                "ItemModel", "PageCache", "SchemaEdit",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ]
        ),
        // A query over the mount's rows, compiled to SQL.
        .target(name: "MetadataIndex", dependencies: ["QueryLanguage", "LocalState", "ItemModel", .product(name: "GRDB", package: "GRDB.swift")]),
        // The query language: lexer, parser, key table, type checks and evaluation; no I/O.
        .target(name: "QueryLanguage"),
        .target(
            name: "VFS",
            dependencies: ["OpenFiles", "CacheFiles", "LocalState", "ItemModel", .product(name: "Logging", package: "swift-log")]
        ),
        .target(
            name: "SyncEngine",
            dependencies: [
                "OpenFiles", "CacheFiles", "LocalState", "SyncAPI", "ItemModel", "PageCache",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .target(
            name: "SyncClient",
            dependencies: [
                "SyncAPI", "ItemModel", "ControlSocket",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(name: "OpenFiles", dependencies: ["LocalState", "ItemModel", "CacheFiles"]),
        .target(
            name: "CacheFiles",
            dependencies: ["ItemModel", "PageCache", .product(name: "Crypto", package: "swift-crypto")]
        ),
        .target(
            name: "LocalState",
            dependencies: ["ItemModel", "SchemaEdit", .product(name: "GRDB", package: "GRDB.swift")]
        ),
        .target(name: "SchemaEdit", dependencies: [.product(name: "GRDB", package: "GRDB.swift")]),
        .target(name: "SyncAPI", dependencies: ["ItemModel"]),
        // The S3 REST operations with SigV4 signing, over AsyncHTTPClient; knows nothing of ubiq.
        .target(
            name: "S3Client",
            dependencies: [
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .target(name: "PageCache"),
        .target(name: "DataFolderLock"),
        .target(name: "FuseKit", dependencies: ["CFuse3", "MountInfo"]),
        // An item's extended attributes by path: the command line's and UbiqKit's reading of
        // the `user.ubiq.*` state.
        .target(name: "ItemAttributes"),
        // Reaching a mount's daemon (which mount holds a path, its registry entry, one request
        // on its control socket) and the mount table: Glibc only, for `ubiq`.
        .target(name: "ControlSocket", dependencies: ["MountInfo"]),
        .target(name: "MountInfo"),
        .systemLibrary(name: "CFuse3", pkgConfig: "fuse3", providers: [.apt(["libfuse3-dev"])]),
        .target(name: "ItemModel", dependencies: [.product(name: "Crypto", package: "swift-crypto")]),
        .target(
            name: "TestSupport",
            dependencies: [
                "ServerStorage", "PostgresStorage", "SyncService", "SyncAPI", "ItemModel", "SyncEngine", "S3BlobStore", "S3Client", "MountInfo",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        .testTarget(name: "QueryLanguageTests", dependencies: ["QueryLanguage"]),
        // QueryLanguage: to check that a predicate's arguments are quoted as the parser reads them.
        .testTarget(name: "UbiqKitTests", dependencies: ["UbiqKit", "TestSupport", "SyncAPI", "ItemModel", "QueryLanguage"]),
        .testTarget(
            name: "MetadataIndexTests",
            dependencies: ["MetadataIndex", "QueryLanguage", "LocalState", "ItemModel", .product(name: "GRDB", package: "GRDB.swift")]
        ),
        .testTarget(name: "FuseKitTests", dependencies: ["FuseKit", "MountInfo"]),
        .testTarget(
            name: "VFSTests",
            dependencies: ["VFS", "SyncEngine", "SyncClient", "OpenFiles", "CacheFiles", "LocalState", "TestSupport", "SyncAPI", "ItemModel", .product(name: "Logging", package: "swift-log")]
        ),
        .testTarget(
            name: "MountTests",
            dependencies: ["TestSupport", "SyncAPI", "ItemModel", "PostgresStorage", "S3Client"]
        ),
        .testTarget(name: "ItemModelTests", dependencies: ["ItemModel", "SyncAPI"]),
        .testTarget(name: "PageCacheTests", dependencies: ["PageCache"]),
        .testTarget(
            name: "ServerStorageTests",
            // GRDB: to make a database as an earlier version left it, and migrate it.
            dependencies: ["ServerStorage", "PostgresStorage", "TestSupport", "ItemModel", .product(name: "GRDB", package: "GRDB.swift"), .product(name: "NIOCore", package: "swift-nio")]
        ),
        .testTarget(
            name: "S3Tests",
            dependencies: [
                "S3Client", "S3BlobStore", "ServerStorage", "SyncService", "SyncAPI", "TestSupport", "ItemModel",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .testTarget(
            name: "SyncClientTests",
            dependencies: ["SyncClient", "ControlSocket", "TestSupport", "SyncAPI", "ItemModel", .product(name: "NIOCore", package: "swift-nio")]
        ),
        .testTarget(
            name: "SyncServerTests",
            dependencies: [
                "TestSupport", "SyncAPI", "ItemModel", "SyncServer", "SyncService", "ServerStorage", "PostgresStorage", "S3Client",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
    ]
)
