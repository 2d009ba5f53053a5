import Foundation
import ItemModel
import ServerStorage

extension StorageConformance {
    static let identities: [StorageConformance] = [
        StorageConformance("account identities: made with the account, its own, the same at every read, gone with it") { f in
            let s = f.storage.accounts
            let alice = try await s.identity(of: f.alice)
            try expect(AccountIdentity.isWellFormed(alice), "64 lowercase hex digits: \(alice)")
            try expect(try await s.identity(of: f.alice) == alice, "the same at every read")
            let bob = try await s.addAccount(name: "bob", passwordHash: "h")
            let bobs = try await s.identity(of: bob)
            try expect(bobs != alice, "every account has its own")
            // Not derived from the name: the same name added again is another account.
            _ = try await s.removeAccount(name: "bob")
            try await expectStorageError("a removed account's", { if case .accountNotFound = $0 { true } else { false } }) {
                try await s.identity(of: bob)
            }
            let bobAgain = try await s.addAccount(name: "bob", passwordHash: "h")
            try expect(try await s.identity(of: bobAgain) != bobs, "an account added again under the same name has a new identity")
            try expect(try await s.identity(of: f.alice) == alice, "and the others keep theirs")
        },
    ]
}
