#!/usr/bin/python
# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_gateway
short_description: Take an SGLang worker out of an SGLang Model Gateway, or register it again
version_added: 0.3.0
description:
  - Talks to the control plane of an SGLang Model Gateway (PyPI C(sglang-router), the Rust router, 0.3.2
    measured) over HTTP, never through a proxy. A worker is matched by its URL as the gateway lists it (scheme
    and host without case, no trailing slash); every listed worker with that URL is meant.
  - The gateway may list the node's server under another URL than O(url), with the same scheme and port - one of
    the node's addresses (O(node_addresses)), a host name that resolves to them or is the node's own host name, or
    loopback (V(127.0.0.0/8), V(::1), V(localhost)) in a gateway that runs on the node (its O(gateway_url) names
    loopback or one of the node's addresses). Such a worker is this node's worker too - taken out with it, and
    registered again under the URL the gateway listed, so that the gateway routes as before. A listed worker at that
    port whose host may or may not be the node (a name that resolves to the node and to other hosts, or an address
    when the node's addresses cannot be read) fails the task before anything is changed, naming both URLs.
  - O(state=absent) finds the worker (C(GET /workers)), checks the capacity guard O(min_healthy), takes it out
    (C(DELETE /workers/{id}); the gateway sends it no new request from then on, and lets those it runs
    finish) and, with O(wait), waits until the gateway lists it no more. It returns the worker's
    RV(registration), to give to O(state=present) later.
  - O(state=present) registers the worker (C(POST /workers)) with the fields of O(registration), unless the
    gateway lists it already, and with O(wait) waits until the gateway lists it healthy. The gateway registers in
    the background and reads the worker's C(/health), C(/server_info) and C(/model_info) meanwhile; a worker
    removed and added again gets a new id and a closed circuit breaker. With O(registrations), registers each one
    under its own URL instead.
  - O(state=query) only reads the gateway's workers.
  - What was measured on sglang-router 0.3.2, and what this module relies on. C(GET /workers) lists C(id) (a
    UUID), C(url), C(model_id), C(priority), C(cost), C(worker_type), C(is_healthy), C(load),
    C(connection_mode), C(disable_health_check) and C(metadata), which merges the labels given at
    registration with what the gateway read from the worker (C(model_path), C(served_model_name), C(tp_size),
    ...) and with priority and cost as strings. The worker API key is not listed, so O(worker_api_key) must be
    given again. C(POST /workers) answers 202 and ignores fields it does not know; C(DELETE /workers/{id})
    answers 202, and 404 for an id it does not know. C(/add_worker) and C(/remove_worker) answer 404 in
    this release.
author:
  - gpuops maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.host.attributes
attributes:
  check_mode:
    support: full
    details:
      - Reads the gateway's workers and checks the capacity guard, calls no write endpoint, and predicts
        C(changed) and the registration.
  diff_mode:
    support: none
  idempotent:
    support: full
    details:
      - Taking out a worker that the gateway does not list, or registering one that it lists, changes nothing.
options:
  gateway_url:
    description: Base URL of the gateway, for example V(http://gateway.example:30000).
    type: str
    required: true
  admin_key:
    description:
      - Admin key of the gateway's control plane (one of its C(--control-plane-api-keys) with role admin), sent as
        a bearer token. Leave it unset for a gateway that runs without control-plane keys.
      - A request that carries a key (this one, or O(worker_api_key)) is sent only over https, or over plain http to a
        loopback address of the host the task runs on whose listener a gateway process holds (C(sglang::router),
        C(sglang_router.launch_router)); anywhere else it fails before anything is sent. No redirect is followed.
    type: str
  state:
    description:
      - V(absent) takes the worker out, V(present) registers it, V(query) only reads.
    type: str
    choices: [absent, present, query]
    default: query
  url:
    description:
      - The worker's URL as the gateway reaches it, for example V(http://gpu-node-1:30000).
      - Required for O(state=absent) and O(state=present); with O(state=query) it picks RV(worker).
      - The gateway may list the same server under another URL; see O(node_addresses).
    type: str
  node_addresses:
    description:
      - The IP addresses of the node whose server O(url) names, to tell which other URLs that a gateway lists reach
        the same server (the same scheme and port, and a host that is one of these addresses, or loopback in a
        gateway on the node).
      - Omitted, the addresses of the host the module runs on (its C(/proc/net/fib_trie) local entries and
        C(/proc/net/if_inet6)), and that host's own name - right when the module runs on the node. B(Set it when
        the module runs on another host) (C(delegate_to)); a loopback URL of a gateway is then the node's only when
        these addresses are those of the host the module runs on.
    type: list
    elements: str
  min_healthy:
    description:
      - Capacity guard of O(state=absent), checked before anything is changed. The number (V(2)) or share of
        the workers the gateway lists for the worker's model (V(50%), rounded up) that must stay healthy once
        the worker and every worker in O(leaving) are out. When fewer would, the module fails and changes nothing.
      - V(0) turns the guard off.
    type: str
    default: "0"
  leaving:
    description:
      - Other worker URLs that leave the gateway at the same time (the rest of a batch of a rollout), counted as
        gone by the capacity guard. They are not removed by this call.
    type: list
    elements: str
    default: []
  registration:
    description:
      - Fields of the registration for O(state=present), as RV(registration) of O(state=absent) returns them,
        C(model_id), C(priority), C(cost), C(worker_type), C(labels), C(disable_health_check). Omitted fields
        take the gateway's defaults, and the model id is then read from the worker.
      - Mutually exclusive with O(registrations).
    type: dict
    default: {}
  registrations:
    description:
      - The registrations to give back with O(state=present), as RV(registrations) of O(state=absent) returns them -
        each one registered under its own URL (unless the gateway lists that URL already), so that a worker that
        the gateway listed under another URL than O(url) is listed as before.
      - Each URL must reach the server at O(url) (see O(node_addresses)); otherwise the module fails before
        anything is registered.
    type: list
    elements: dict
    suboptions:
      url:
        description: The URL the gateway listed the worker by.
        type: str
        required: true
      registration:
        description: Its fields, as O(registration) takes them.
        type: dict
        default: {}
  worker_api_key:
    description:
      - API key that the gateway sends to this worker (the worker's C(--api-key)), for O(state=present). The
        gateway never lists it, so a registration cannot carry it over.
      - Sent only where O(admin_key) may be sent.
    type: str
  wait:
    description: Wait until the gateway lists the worker no more (V(absent)) or lists it healthy (V(present)).
    type: bool
    default: true
  wait_timeout:
    description: Seconds to wait with O(wait). A worker that is not healthy by then fails the task.
    type: float
    default: 60
  interval:
    description: Seconds between two readings of the gateway's workers while waiting.
    type: float
    default: 0.5
  request_timeout:
    description: Seconds for each HTTP request to the gateway.
    type: float
    default: 10
seealso:
  - module: gpuops.host.sglang_server
notes:
  - The gateway does not drain a worker. Once it is out, the worker's own drain (the stop of
    M(gpuops.host.sglang_server), O(gpuops.host.sglang_server#module:stop)) waits for the requests it still runs.
"""

EXAMPLES = r"""
- name: Take this node's worker out of the gateway, keeping 2 healthy workers for its model
  gpuops.host.sglang_gateway:
    gateway_url: http://gateway.example:30000
    admin_key: "{{ vault_gateway_admin_key }}"
    url: "http://{{ inventory_hostname }}:30000"
    state: absent
    min_healthy: "2"
  register: out

- name: Register it again with the same labels, priority, cost and model id, and wait until it is healthy
  gpuops.host.sglang_gateway:
    gateway_url: http://gateway.example:30000
    admin_key: "{{ vault_gateway_admin_key }}"
    url: "http://{{ inventory_hostname }}:30000"
    state: present
    registration: "{{ out.registration }}"
    worker_api_key: "{{ vault_sglang_api_key }}"
    wait_timeout: 120

- name: Take the worker out of a gateway that lists it as http://127.0.0.1:30000 too, running the task on the node
  gpuops.host.sglang_gateway:
    gateway_url: http://127.0.0.1:8080
    url: "http://{{ inventory_hostname }}:30000"
    state: absent
  register: out

- name: Register each of its registrations again, under the URL the gateway listed it by
  gpuops.host.sglang_gateway:
    gateway_url: http://127.0.0.1:8080
    url: "http://{{ inventory_hostname }}:30000"
    state: present
    registrations: "{{ out.registrations }}"

- name: List the gateway's workers
  gpuops.host.sglang_gateway:
    gateway_url: http://gateway.example:30000
  register: listing
"""

RETURN = r"""
workers:
  description: The gateway's workers as C(GET /workers) listed them before any change.
  returned: state is absent or query
  type: list
  elements: dict
  sample:
    - id: 00eba557-0b12-4909-89f5-2264b1b7de9f
      url: http://gpu-node-1:30000
      model_id: meta-llama/Llama-3.1-8B-Instruct
      priority: 50
      cost: 1.0
      worker_type: regular
      is_healthy: true
      load: 0
      connection_mode: HTTP
      disable_health_check: false
      metadata: {zone: a, tp_size: "2"}
worker:
  description:
    - The worker at O(url) as the gateway lists it (with O(state=present), once healthy), or the first one listed under
      another URL that reaches the same server; null when it is not listed.
  returned: always
  type: dict
  sample: {id: 2fcea9e3-544a-4199-9228-255e2b1090bb, url: http://gpu-node-1:30000, is_healthy: true}
registration:
  description:
    - The worker's registration, to register it again with O(state=present) - labels (its metadata less what the
      gateway read from the worker), priority, cost, worker type, and the model id when it differs from the one
      the worker reports. With O(state=present), the fields registered (or asked for, where the gateway lists the
      worker already). Null when the gateway does not list the worker.
    - Where the gateway lists the server under several URLs, the registration of O(url) itself (or of the first
      other URL); RV(registrations) has each one.
  returned: always
  type: dict
  sample: {model_id: llama-8b, priority: 50, cost: 1.0, worker_type: regular, labels: {zone: a}}
registrations:
  description:
    - One entry per URL that the gateway lists the server at O(url) by - O(url) itself and each other URL that
      reaches the same server (see O(node_addresses)) - with C(url), the URL as the gateway lists it, and
      C(registration), as RV(registration). Give it to O(registrations) to register each one again.
    - With O(state=present), what was registered (or asked for, where the gateway lists it already).
  returned: always
  type: list
  elements: dict
  sample:
    - url: http://127.0.0.1:30000
      registration: {priority: 50, cost: 1.0, worker_type: regular, labels: {zone: a}}
removed:
  description: Ids of the workers taken out (to be taken out, in check mode), at any of the URLs of RV(registrations).
  returned: state is absent
  type: list
  elements: str
  sample: [00eba557-0b12-4909-89f5-2264b1b7de9f]
capacity:
  description: Per model of the worker, the workers listed, the healthy ones left once it is out, and the minimum.
  returned: state is absent
  type: dict
  sample: {llama-8b: {total: 3, healthy_after: 2, required: 2}}
seconds:
  description: Seconds spent waiting for the gateway.
  returned: always
  type: float
  sample: 0.51
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.host.plugins.module_utils._gateway import (
    Gateway, GatewayError, Node, listeners, put_back, query, take_out)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            gateway_url=dict(type='str', required=True),
            admin_key=dict(type='str', no_log=True),
            state=dict(type='str', choices=['absent', 'present', 'query'], default='query'),
            url=dict(type='str'),
            node_addresses=dict(type='list', elements='str'),
            min_healthy=dict(type='str', default='0'),
            leaving=dict(type='list', elements='str', default=[]),
            registration=dict(type='dict', default={}),
            registrations=dict(type='list', elements='dict', options=dict(
                url=dict(type='str', required=True), registration=dict(type='dict', default={}))),
            worker_api_key=dict(type='str', no_log=True),
            wait=dict(type='bool', default=True),
            wait_timeout=dict(type='float', default=60),
            interval=dict(type='float', default=0.5),
            request_timeout=dict(type='float', default=10),
        ),
        required_if=[('state', 'absent', ['url']), ('state', 'present', ['url'])],
        mutually_exclusive=[('registration', 'registrations')],
        supports_check_mode=True,
    )
    p = module.params
    gw = Gateway(p['gateway_url'], admin_key=p['admin_key'], timeout=p['request_timeout'],
                 holders=listeners(p['gateway_url']))
    waiting = dict(clock=time.monotonic, sleep=time.sleep, check=module.check_mode, wait=p['wait'],
                   timeout=p['wait_timeout'], interval=p['interval'])
    try:
        node = Node.here(p['node_addresses'])
        if p['state'] == 'absent':
            result = take_out(gw, p['url'], minimum=p['min_healthy'], leaving=p['leaving'], node=node, **waiting)
        elif p['state'] == 'present':
            result = put_back(gw, p['url'], fields=p['registration'], worker_api_key=p['worker_api_key'],
                              given=p['registrations'], node=node, **waiting)
        else:
            result = query(gw, p['url'], node=node)
    except GatewayError as e:
        module.fail_json(msg=str(e), **e.data)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
