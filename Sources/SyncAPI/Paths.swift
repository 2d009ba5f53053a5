import ItemModel

/// The protocol's routes, in one place for the server's router and every client.
public enum APIPath {
    public static let health = "/health"
    public static let token = "/v1/auth/token"
    public static let containers = "/v1/containers"
    public static let whoami = "/v1/whoami"

    public static func container(_ c: ContainerID) -> String { "/v1/containers/\(c.rawValue)" }
    public static func items(_ c: ContainerID) -> String { container(c) + "/items" }
    public static func item(_ c: ContainerID, _ id: ItemID) -> String { items(c) + "/\(id.rawValue)" }
    public static func children(_ c: ContainerID, _ id: ItemID) -> String { item(c, id) + "/children" }
    public static func content(_ c: ContainerID, _ id: ItemID) -> String { item(c, id) + "/content" }
    public static func xattrs(_ c: ContainerID, _ id: ItemID) -> String { item(c, id) + "/xattrs" }
    public static func conflicts(_ c: ContainerID, _ id: ItemID) -> String { item(c, id) + "/conflicts" }
    public static func resolve(_ c: ContainerID, _ id: ItemID) -> String { item(c, id) + "/resolve" }
    public static func versions(_ c: ContainerID, _ id: ItemID) -> String { item(c, id) + "/versions" }
    public static func restore(_ c: ContainerID, _ id: ItemID) -> String { item(c, id) + "/restore" }
    public static func batch(_ c: ContainerID) -> String { container(c) + "/batch" }
    public static func changes(_ c: ContainerID) -> String { container(c) + "/changes" }
    public static func changeStream(_ c: ContainerID) -> String { container(c) + "/changes/stream" }
    public static func blob(_ d: ContentDigest) -> String { "/v1/blobs/\(d.hex)" }
    public static func shares(_ c: ContainerID) -> String { container(c) + "/shares" }
    public static func share(_ c: ContainerID, token: String) -> String { shares(c) + "/\(token)" }
    /// A share's public address: no token needed, nothing but the snapshot behind it.
    public static func publicShare(_ token: String) -> String { "/s/\(token)" }
}
