import Foundation
import GRDB
import ItemModel

/// Every row, for `ubiq-server migrate` (`MetadataDump`).
extension SQLiteMetadataStore: MetadataExporting {
    public func exportAll() async throws -> MetadataDump {
        try readNow { db in
            var d = MetadataDump()
            // One sequence numbers the changes of every container: no container's next change
            // may get a cursor at or below the highest any device was handed.
            let highest = try Int64.fetchOne(db, sql: "SELECT seq FROM sqlite_sequence WHERE name = 'changes'") ?? 0
            d.accounts = try Row.fetchAll(db, sql: "SELECT key, name, password_hash, created, identity FROM accounts ORDER BY key").map {
                MetadataDump.Account(key: $0["key"], name: $0["name"], passwordHash: $0["password_hash"], created: $0["created"], identity: $0["identity"])
            }
            d.tokens = try Row.fetchAll(db, sql: "SELECT hash, account_key, created, device, used, expires FROM tokens").map {
                MetadataDump.Token(hash: $0["hash"], accountKey: $0["account_key"], created: $0["created"], device: $0["device"], used: $0["used"], expires: $0["expires"])
            }
            d.containers = try Row.fetchAll(db, sql: "SELECT key, account_key, name, created, kv_version FROM containers").map {
                MetadataDump.Container(
                    key: $0["key"], accountKey: $0["account_key"], name: $0["name"], created: $0["created"], changeCursor: highest, keyValueVersion: $0["kv_version"])
            }
            d.items = try Row.fetchAll(db, sql: "SELECT * FROM items").map {
                MetadataDump.Item(containerKey: $0["container_key"], item: try Self.item(from: $0), savedBy: $0["saved_by"])
            }
            d.changes = try Row.fetchAll(db, sql: "SELECT container_key, seq, item_id, kind, item_json FROM changes").map {
                MetadataDump.Change(containerKey: $0["container_key"], seq: $0["seq"], itemID: $0["item_id"], kind: $0["kind"], itemJSON: $0["item_json"])
            }
            d.grants = try Row.fetchAll(db, sql: "SELECT account_key, digest, size, granted FROM account_blobs").map {
                MetadataDump.Grant(accountKey: $0["account_key"], digest: $0["digest"], size: $0["size"], granted: $0["granted"])
            }
            d.inlineContents = try Row.fetchAll(db, sql: "SELECT digest, bytes FROM inline_contents").map {
                MetadataDump.InlineContent(digest: $0["digest"], bytes: $0["bytes"])
            }
            d.earlierVersions = try Row.fetchAll(db, sql: "SELECT * FROM earlier_versions").map {
                MetadataDump.EarlierVersion(
                    containerKey: $0["container_key"], itemID: $0["item_id"], revision: $0["revision"], digest: $0["digest"], size: $0["size"],
                    modified: $0["modified"], replaced: $0["replaced"], device: $0["device"])
            }
            d.keyValues = try Row.fetchAll(db, sql: "SELECT container_key, key, version, value, removed FROM key_values").map {
                MetadataDump.KeyValue(containerKey: $0["container_key"], key: $0["key"], version: $0["version"], value: $0["value"], removed: ($0["removed"] as Int64) != 0)
            }
            d.shares = try Row.fetchAll(db, sql: "SELECT * FROM shares").map {
                MetadataDump.Share(
                    token: $0["token"], containerKey: $0["container_key"], itemID: $0["item_id"], name: $0["name"], kind: $0["kind"], created: $0["created"],
                    expires: $0["expires"], downloads: $0["downloads"])
            }
            d.shareEntries = try Row.fetchAll(db, sql: "SELECT token, path, digest, size, modified FROM share_entries").map {
                MetadataDump.ShareEntry(token: $0["token"], path: $0["path"], digest: $0["digest"], size: $0["size"], modified: $0["modified"])
            }
            d.pendingDeletions = try Row.fetchAll(db, sql: "SELECT digest, queued FROM blob_deletions").map {
                MetadataDump.PendingDeletion(digest: $0["digest"], queued: $0["queued"])
            }
            return d.sorted()
        }
    }
}
