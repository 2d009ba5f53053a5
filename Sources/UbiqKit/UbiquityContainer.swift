import Foundation
import SyncAPI
import Synchronization

/// The account's identity as the mount reports it: the same on every device of the account,
/// another for another account (docs/SEMANTICS.md, "Account identity"). Opaque, as Apple's
/// `ubiquityIdentityToken` is: compare it, keep it, never read meaning into it.
public struct UbiquityIdentityToken: Sendable, Hashable, Codable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }
}

/// The running mounts as ubiquity containers: `FileManager.url(forUbiquityContainerIdentifier:)`
/// and `ubiquityIdentityToken`.
public enum UbiquityContainer {
    /// The top of a running mount of the container `identifier` (its `ubiq mount --container`),
    /// nil when none runs, as Apple's answers nil without iCloud. A nil identifier is the
    /// default container: the mount of the container named `default`, else the first mount made.
    /// Blocks for a round trip to each mount's daemon (at most 5 s for one that hangs), as
    /// Apple's call may block: do not call it where a pause shows.
    public static func url(forIdentifier identifier: String?, registry: MountRegistryLocation = .standard) -> URL? {
        if let identifier {
            return RunningMount.all(in: registry).first { (try? $0.whoami())?.container == identifier }?.root
        }
        return defaultMount(in: registry)?.mount.root
    }

    /// The identity token of the account the default container's mount shows; nil when no mount
    /// runs or the mount has not reached its server yet.
    public static var ubiquityIdentityToken: UbiquityIdentityToken? { identityToken(registry: .standard) }

    /// NSUbiquityIdentityDidChange: posted on `NotificationCenter.default` (object nil) at each
    /// change of a token a program has read, from its first read on (as Apple's apps read the
    /// token at launch, then observe this). The changes are those of `identityChanges()`, at
    /// its default pace.
    public static let identityDidChangeNotification = Notification.Name("NSUbiquityIdentityDidChangeNotification")

    /// The identity token of the account shown by the mount of `containerURL` (nil: the default
    /// container's).
    public static func identityToken(forContainerAt containerURL: URL? = nil, registry: MountRegistryLocation = .standard) -> UbiquityIdentityToken? {
        startPostingIdentityChanges(MountTarget(containerURL: containerURL, registry: registry))
        return currentIdentityToken(forContainerAt: containerURL, registry: registry)
    }

    /// The tokens whose changes are being posted: one watch each for the process's life.
    static let posting = Mutex<Set<MountTarget>>([])

    static func startPostingIdentityChanges(_ target: MountTarget) {
        guard posting.withLock({ $0.insert(target).inserted }) else { return }
        let changes = identityChanges(forContainerAt: target.containerURL, registry: target.registry)
        Task {
            for await _ in changes { NotificationCenter.default.post(name: identityDidChangeNotification, object: nil) }
        }
    }

    static func currentIdentityToken(forContainerAt containerURL: URL?, registry: MountRegistryLocation) -> UbiquityIdentityToken? {
        let report: WhoAmIReport?
        if let containerURL {
            report = try? RunningMount.containing(containerURL, in: registry).mount.whoami()
        } else {
            report = defaultMount(in: registry)?.whoami
        }
        return report?.identityToken.map(UbiquityIdentityToken.init(rawValue:))
    }

    /// Each change of `ubiquityIdentityToken` after this call (NSUbiquityIdentityDidChange):
    /// another account, a first contact with the server, the last mount going (nil) or one
    /// coming. The mounts are asked every `interval`: a change of account is rare, and asking
    /// costs a round trip to each daemon, so a slow pace is enough. Ends when the consumer
    /// stops iterating.
    public static func identityChanges(
        forContainerAt containerURL: URL? = nil, every interval: Duration = .seconds(2), registry: MountRegistryLocation = .standard
    ) -> AsyncStream<UbiquityIdentityToken?> {
        // Read now: a change between this call and the first poll is a change.
        let first = currentIdentityToken(forContainerAt: containerURL, registry: registry)
        return AsyncStream { continuation in
            let task = Task {
                var last = first
                while !Task.isCancelled {
                    try? await Task.sleep(for: interval)
                    let now = currentIdentityToken(forContainerAt: containerURL, registry: registry)
                    if now != last {
                        continuation.yield(now)
                        last = now
                    }
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// The default container's mount, with what its daemon says of it.
    static func defaultMount(in registry: MountRegistryLocation) -> (mount: RunningMount, whoami: WhoAmIReport)? {
        let answering = RunningMount.all(in: registry).compactMap { mount in (try? mount.whoami()).map { (mount: mount, whoami: $0) } }
        return answering.first { $0.whoami.container == "default" } ?? answering.first
    }
}

#if !canImport(Darwin)
extension Notification.Name {
    public static let NSUbiquityIdentityDidChange = UbiquityContainer.identityDidChangeNotification
}

extension FileManager {
    /// `UbiquityContainer.url(forIdentifier:)`, under Apple's name.
    public func url(forUbiquityContainerIdentifier containerIdentifier: String?) -> URL? {
        UbiquityContainer.url(forIdentifier: containerIdentifier)
    }

    /// `UbiquityContainer.ubiquityIdentityToken`, under Apple's name.
    public var ubiquityIdentityToken: UbiquityIdentityToken? { UbiquityContainer.ubiquityIdentityToken }
}
#endif
