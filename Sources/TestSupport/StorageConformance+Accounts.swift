import Foundation
import ItemModel
import NIOCore
import ServerStorage

extension StorageConformance {
    static let accounts: [StorageConformance] = [
        StorageConformance("tokens: found by hash with their account, renewed, listed, revoked one or all, forgotten once expired") { f in
            let s = f.storage.accounts
            let bob = try await s.addAccount(name: "bob", passwordHash: "h")
            func token(_ hash: String, _ account: AccountRef, created: Timestamp, expires: Timestamp) -> StoredToken {
                StoredToken(hash: hash, account: account, device: "host-\(hash)", created: created, used: created, expires: expires)
            }
            let t1 = token(String(repeating: "a", count: 64), bob, created: 10, expires: 100)
            let t2 = token(String(repeating: "b", count: 64), bob, created: 20, expires: 200)
            let t3 = token(String(repeating: "c", count: 64), f.alice, created: 30, expires: 300)
            for t in [t1, t2, t3] { try await s.addToken(t) }
            try expect(try await s.token(hash: t1.hash) == t1, "a token is found with everything it was stored with")
            try expect(try await s.token(hash: "nope") == nil, "an unknown token finds nothing")
            try await s.renewToken(hash: t1.hash, used: 50, expires: 150)
            try expect(try await s.token(hash: t1.hash).map { ($0.used, $0.expires) } ?? (0, 0) == (50, 150), "renewed")
            try expect(try await s.tokens(ofAccount: "bob").map(\.hash) == [t1.hash, t2.hash], "an account's tokens, oldest first, no other's")
            try await expectStorageError("tokens of no account", { if case .accountNotFound = $0 { true } else { false } }) {
                try await s.tokens(ofAccount: "nobody")
            }
            try expect(try await s.revokeTokens(ofAccount: "bob", ids: [t2.id]).map(\.hash) == [t2.hash], "one revoked by its id")
            try expect(try await s.token(hash: t2.hash) == nil, "a revoked token is gone")
            try expect(try await s.revokeTokens(ofAccount: "bob", ids: [t3.id]).isEmpty, "another account's token is not revoked through this one")
            try expect(try await s.revokeToken(hash: t3.hash), "a logout revokes the token")
            try expect(try await !s.revokeToken(hash: t3.hash), "once")
            try await s.addToken(t2)
            try expect(try await s.forgetTokens(expiredBefore: 160) == 1, "only tokens expired before the cutoff are forgotten")
            try expect(try await s.tokens(ofAccount: "bob").map(\.hash) == [t2.hash], "the one still valid stays")
            try expect(try await s.revokeTokens(ofAccount: "bob", ids: nil).map(\.hash) == [t2.hash], "all revoked")
        },
        StorageConformance("removing an account says what went and queues the contents no other account holds") { f in
            let s = f.storage.accounts
            let bob = try await s.addAccount(name: "bob", passwordHash: "h")
            let bobs = try await f.m.container(.default, of: bob, create: true)!
            func blob(_ text: String, for accounts: [AccountRef]) async throws -> ContentDigest {
                let writer = try await f.storage.blobs.makeWriter()
                try await writer.write(ByteBuffer(string: text))
                let (digest, size) = try await writer.commit(expecting: nil)
                for a in accounts { try await f.m.recordBlob(digest, size: size, for: a) }
                return digest
            }
            let own = try await blob("bob's alone", for: [bob])
            let common = try await blob("both have it", for: [bob, f.alice])
            let folder = try await f.m.createItem(try f.newItem("docs", kind: .folder), in: bobs)
            _ = try await f.m.createItem(try f.newItem("a", parent: folder.id, kind: .file, digest: own), in: bobs)
            _ = try await f.m.createItem(try f.newItem("b", kind: .file, digest: common), in: bobs)
            try await s.addToken(StoredToken(hash: "t", account: bob, device: nil, created: 1, used: 1, expires: 2))
            try expect(try await f.m.pendingBlobDeletions(limit: 10).isEmpty, "nothing queued before")

            let removal = try await s.removeAccount(name: "bob")
            var expected = AccountRemoval()
            expected.containers = 1
            expected.items = 3
            expected.tokens = 1
            expected.contents = 1
            expected.contentBytes = Int64("bob's alone".utf8.count)
            try expect(removal == expected, "\(removal)")
            try expect(try await f.m.pendingBlobDeletions(limit: 10) == [own], "only the content no other account holds is queued")
            try expect(try await !f.m.isGranted(own), "its grant went with the account")
            try expect(try await f.m.isGranted(common), "the other account keeps its grant")
            try await f.m.finishBlobDeletion(own)
            try expect(try await f.m.pendingBlobDeletions(limit: 10).isEmpty, "a finished deletion leaves the queue")
        },
    ]
}
