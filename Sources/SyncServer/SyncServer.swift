import Hummingbird
import Prometheus
import ItemModel
import ServerStorage
import SyncAPI
import SyncService

public struct SyncServerConfiguration: Sendable {
    /// The largest content upload accepted; larger bodies get 413 `payload_too_large`.
    public var maxUploadBytes: Int64
    /// 1 MiB: the largest JSON body; item metadata with its attributes is far smaller.
    public var maxJSONBytes: Int
    /// How often an idle push stream sends a comment line, so that dead clients are noticed and
    /// proxies keep the connection open.
    public var keepAliveInterval: Duration

    /// 4 MiB: a batch's JSON, with up to `SyncProtocol.maxBatchContent` of base64 content.
    public var maxBatchBytes: Int

    /// How long a checked token (and an account's right to a content) is remembered, so that
    /// it costs no database read; also how long a removed account's tokens may still work.
    public var recentAnswers: Duration

    /// `/metrics` is served by `makeMetricsApplication` on an address of its own, not here.
    public var metricsOnOwnAddress: Bool

    /// Share fetches (`/s/…`) one client address may make a minute, in bursts of as many;
    /// past it 429 `rate_limited`. 0: no limit.
    public var shareFetchesPerMinute: Int

    /// Failed logins one account may have a minute (an address: four times as many) before
    /// further logins are refused with 429 `rate_limited` (`LoginThrottle`). 0: no limit.
    public var loginFailuresPerMinute: Int

    /// How long a token lives after its last use.
    public var tokenLifetime: Duration

    /// What one client may hold: see `ConnectionLimits`.
    public var connections: ConnectionLimits

    /// Requests one account may make a minute, in bursts of as many; past it 429
    /// `rate_limited`. 0: no limit.
    public var accountRequestsPerMinute: Int

    public init(maxUploadBytes: Int64 = 64 << 30, maxJSONBytes: Int = 1 << 20, maxBatchBytes: Int = 4 << 20, keepAliveInterval: Duration = .seconds(15),
                recentAnswers: Duration = .seconds(10), metricsOnOwnAddress: Bool = false, shareFetchesPerMinute: Int = 600,
                loginFailuresPerMinute: Int = 5, tokenLifetime: Duration = TokenPolicy.defaultLifetime,
                connections: ConnectionLimits = ConnectionLimits(), accountRequestsPerMinute: Int = 0) {
        self.connections = connections
        self.accountRequestsPerMinute = accountRequestsPerMinute
        self.shareFetchesPerMinute = shareFetchesPerMinute
        self.loginFailuresPerMinute = loginFailuresPerMinute
        self.tokenLifetime = tokenLifetime
        self.recentAnswers = recentAnswers
        self.metricsOnOwnAddress = metricsOnOwnAddress
        self.maxBatchBytes = maxBatchBytes
        self.maxUploadBytes = maxUploadBytes
        self.maxJSONBytes = maxJSONBytes
        self.keepAliveInterval = keepAliveInterval
    }
}

/// Limits on connections, so that no client holds the server's resources for ever.
public struct ConnectionLimits: Sendable {
    /// Connections open at once; past it new ones wait in the listen backlog.
    public var maxConnections: Int
    /// The bytes of a request's header lines together (431 past it).
    public var maxHeaderBytes: Int
    /// A connection with no request, or a request whose head or body stops arriving, is closed
    /// after this long. An answer being sent (a download, a push stream) does not count.
    public var idleTimeout: Duration
    /// A connection whose client stops reading an answer is closed once it could not be
    /// written to for this long (`StalledWriteTimeout`).
    public var writeTimeout: Duration

    public init(maxConnections: Int = 2048, maxHeaderBytes: Int = 16 << 10, idleTimeout: Duration = .seconds(120), writeTimeout: Duration = .seconds(120)) {
        self.maxConnections = maxConnections
        self.maxHeaderBytes = maxHeaderBytes
        self.idleTimeout = idleTimeout
        self.writeTimeout = writeTimeout
    }
}

/// The sync server's HTTP face: routes, auth and the push stream, over `SyncService`, which
/// decides. It knows no SQL and no file layout.
public struct SyncServer: Sendable {
    public let service: SyncService
    public let configuration: SyncServerConfiguration
    public var storage: ServerStorage { service.storage }
    let tokens: RecentAnswers<String, AccountRef>
    /// (account key, digest) to the content's size, for downloads: a grant is taken back only
    /// after the retention without use (`SyncService.collectBlobs`), and a download of a
    /// collected blob then finds no file; its account can be removed, which the token check
    /// notices within the same lifetime.
    let grants: RecentAnswers<GrantKey, Int64>
    let shareFetches: RateLimit
    let logins: LoginThrottle
    let accountRequests: RateLimit

    struct GrantKey: Hashable, Sendable {
        let account: Int64
        let digest: ContentDigest
    }

    /// Where the process's metrics go (swift-metrics bootstrapped with it), served at
    /// `/metrics`; nil: no such route.
    let metrics: PrometheusCollectorRegistry?

    public init(storage: ServerStorage, configuration: SyncServerConfiguration = .init(), hub: ChangeHub = ChangeHub(), metrics: PrometheusCollectorRegistry? = nil) {
        self.service = SyncService(
            storage: storage, hub: hub, maxUploadBytes: configuration.maxUploadBytes, tokens: TokenPolicy(lifetime: configuration.tokenLifetime))
        self.configuration = configuration
        self.metrics = metrics
        tokens = RecentAnswers(lifetime: configuration.recentAnswers)
        grants = RecentAnswers(lifetime: configuration.recentAnswers)
        shareFetches = RateLimit(perMinute: configuration.shareFetchesPerMinute)
        logins = LoginThrottle(failuresPerMinute: configuration.loginFailuresPerMinute)
        accountRequests = RateLimit(perMinute: configuration.accountRequestsPerMinute)
    }

    public func makeRouter() -> Router<ServerContext> {
        let router = Router(context: ServerContext.self)
        // Outermost: it sees each answer as sent, refusals included.
        if metrics != nil { router.add(middleware: MetricsMiddleware()) }
        router.add(middleware: ErrorMiddleware())
        router.add(middleware: AuthMiddleware(service: service, recent: tokens))
        router.add(middleware: AccountRateMiddleware(limit: accountRequests))

        router.get(RouterPath(APIPath.health)) { _, _ in try json(HealthResponse()) }
        addTokenRoutes(to: router)
        addContainerRoutes(to: router)
        addItemRoutes(to: router)
        addChangeRoutes(to: router)
        addKeyValueRoutes(to: router)
        addBlobRoutes(to: router)
        addShareRoutes(to: router)
        if !configuration.metricsOnOwnAddress { addMetricsRoute(to: router) }
        return router
    }
}
