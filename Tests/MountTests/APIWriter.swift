import Foundation
import ItemModel
import SyncAPI
import TestSupport

/// The third writer: a client of the server's HTTP API beside the two mounts, working on one
/// seed's folder by path. Each step either applies or is dropped (a refusal, a server that is
/// being restarted): the writer reports the tokens whose content the server took.
struct APIWriter {
    /// Logged in as alice.
    let http: TestHTTP
    let folder: String

    /// Runs the steps one after the other; returns the tokens of the contents the server took.
    func run(_ steps: [RandomScript.HTTPStep]) async -> [String] {
        var kept: [String] = []
        for step in steps {
            if let token = try? await apply(step, http) { kept.append(token) }
        }
        return kept
    }

    /// The token the server took, nil for a step without one; throws when the step did not apply.
    private func apply(_ step: RandomScript.HTTPStep, _ http: TestHTTP) async throws -> String? {
        switch step {
        case let .create(folder, name, token):
            let parent = try await item(at: folder, http)
            let content = Data("\(token)\n".utf8)
            let r = try await http.json(.POST, APIPath.items(.default), CreateItemRequest(parentID: parent.id, name: name, kind: .file, digest: sha256(content), content: content))
            guard r.status == 201 else { throw TestSupportError("create: \(r.status)") }
            return token
        case let .append(path, token):
            let file = try await item(at: path, http)
            let old = try await http.send(.GET, APIPath.content(.default, file.id))
            guard old.status == 200, old.headers.first(name: SyncProtocol.revisionHeader) == file.revision.rawValue else { throw TestSupportError("read: \(old.status)") }
            let content = old.body + Data("\(token)\n".utf8)
            let r = try await http.json(.PUT, APIPath.content(.default, file.id), UpdateContentRequest(baseRevision: file.revision, digest: sha256(content), content: content))
            guard r.status == 200 else { throw TestSupportError("append: \(r.status)") }
            return token
        case let .delete(path):
            let victim = try await item(at: path, http)
            let r = try await http.send(.DELETE, APIPath.item(.default, victim.id) + "?baseRevision=\(victim.revision.rawValue)&recursive=true")
            guard r.status == 200 else { throw TestSupportError("delete: \(r.status)") }
            return nil
        case let .rename(path, name):
            let moved = try await item(at: path, http)
            let r = try await http.json(.PATCH, APIPath.item(.default, moved.id), UpdateItemRequest(baseRevision: moved.revision, name: name))
            guard r.status == 200 else { throw TestSupportError("rename: \(r.status)") }
            return nil
        }
    }

    /// The live item at `path` below the seed's folder.
    private func item(at path: String, _ http: TestHTTP) async throws -> ItemMetadata {
        var current = try await child(named: folder, of: .root, http)
        for name in path.split(separator: "/") { current = try await child(named: String(name), of: current.id, http) }
        return current
    }

    private func child(named name: String, of parent: ItemID, _ http: TestHTTP) async throws -> ItemMetadata {
        let list = try await http.send(.GET, APIPath.children(.default, parent)).decode(ItemList.self)
        guard let found = list.items.first(where: { $0.name == name }) else { throw TestSupportError("no \(name)") }
        return found
    }
}
