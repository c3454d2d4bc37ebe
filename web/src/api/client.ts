// The FleetService client: Connect protocol over fetch to the hub that served this page, with
// the signed-in API token on every call.
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { FleetService } from "../gen/kollect/fleet/v1/fleet_pb";

export type Fleet = Client<typeof FleetService>;

export function fleetClient(token: string, baseUrl = window.location.origin): Fleet {
  const auth: Interceptor = (next) => (req) => {
    req.header.set("Authorization", `Bearer ${token}`);
    return next(req);
  };
  return createClient(FleetService, createConnectTransport({ baseUrl, interceptors: [auth] }));
}
