/*
Command imds-emulator stands in for the cloud's instance metadata service
off-cloud, for development, demos and tests. It serves:

	GET /metadata/attested/document?api-version=…[&nonce=…]
	    {"encoding":"pkcs7","signature":"<base64 PKCS#7>"}: the JSON document
	    (nonce, plan, timeStamp, vmId, subscriptionId, sku) signed like the
	    real service (embedded content, signing leaf only, SHA-256, no
	    authenticated attributes) by a leaf whose SAN is under
	    metadata.azure.com, issued by a CA minted at start-up
	GET /metadata/instance?api-version=…   the compute basics
	GET /aia/intermediate.crt              the intermediate (with --intermediate)

Requests need the header "Metadata: true" and an api-version, and must not
carry X-Forwarded-For, as on the real service.

Usage:

	imds-emulator [--listen ADDR] [--vm-id ID] [--subscription ID]
	              [--validity 6h] [--write-roots FILE] [--intermediate
	              --write-intermediates FILE] [--addr-file FILE]

--write-roots writes the CA root for lpsd --imds-roots. The CA lives only as
long as the process: restart lpsd with the new roots after restarting the
emulator.

Exit codes: 0 after a clean shutdown (SIGINT/SIGTERM), 1 on error, 2 on
usage errors.
*/
package main
